#![cfg(all(feature = "cron", not(wheelpool_loom)))]
//! Calendar schedules (feature `cron`). On a ManualClock whose virtual wall clock starts just
//! before the day under test: both DST changes in Berlin and New York (runs at the right UTC
//! instants, none twice, the skipped-hour rule), February 29, `L`, a stepped wall clock. Then
//! the parse errors, and one real-time test with one-sided, generous bounds. Every wait is
//! bounded; nothing sleeps.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wheelpool::cron::{Cron, CronField, SkippedTime};
use wheelpool::{ManualClock, MissedTicks, ScheduledFuture, ScheduledThreadPool, TaskError};

const LIMIT: Duration = Duration::from_secs(30);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn hours(n: u64) -> Duration {
    secs(n * 3600)
}

/// A UTC instant, `"2026-03-29T01:00:00Z"`.
fn utc(s: &str) -> SystemTime {
    SystemTime::from(s.parse::<jiff::Timestamp>().unwrap())
}

/// A wall-clock time in `zone`, `"2026-03-28T12:00"` (must not be ambiguous or skipped).
fn local(s: &str, zone: &str) -> SystemTime {
    let dt: jiff::civil::DateTime = s.parse().unwrap();
    let zoned = dt.in_tz(zone).unwrap();
    SystemTime::from(zoned.timestamp())
}

/// A pool on a manual clock whose wall clock starts at `start`, running `expr` in `zone`
/// and logging the wall-clock time of each run.
struct Calendar {
    clock: ManualClock,
    pool: ScheduledThreadPool,
    task: ScheduledFuture<()>,
    runs: Arc<Mutex<Vec<SystemTime>>>,
}

impl Calendar {
    fn new(expr: &str, zone: &str, start: SystemTime) -> Self {
        Self::with_policy(expr, zone, start, MissedTicks::Burst)
    }

    fn with_policy(expr: &str, zone: &str, start: SystemTime, missed: MissedTicks) -> Self {
        let clock = ManualClock::starting_at(start);
        let pool = ScheduledThreadPool::builder()
            .threads(2)
            .clock(clock.clone())
            .missed_ticks(missed)
            .build()
            .unwrap();
        let cron = Cron::parse(expr, zone).unwrap();
        let runs = Arc::new(Mutex::new(Vec::new()));
        let (log, c) = (runs.clone(), clock.clone());
        let task = pool
            .schedule_cron(move || log.lock().unwrap().push(c.system_time()), &cron)
            .unwrap();
        Calendar {
            clock,
            pool,
            task,
            runs,
        }
    }

    fn runs(&self) -> Vec<SystemTime> {
        self.runs.lock().unwrap().clone()
    }
}

#[test]
fn berlin_daily_across_spring_forward_runs_after_the_gap() {
    // 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that night.
    let cal = Calendar::new(
        "30 2 * * *",
        "Europe/Berlin",
        local("2026-03-28T12:00", "Europe/Berlin"),
    );
    cal.clock.advance(hours(48));
    assert_eq!(
        cal.runs(),
        [
            utc("2026-03-29T01:00:00Z"), // 03:00 CEST: the first instant after the gap
            utc("2026-03-30T00:30:00Z"), // 02:30 CEST
        ]
    );
    assert!(cal.task.cancel());
    // The other rule, as an option: that night has no run.
    let strict = Cron::parse("30 2 * * *", "Europe/Berlin")
        .unwrap()
        .skipped_time(SkippedTime::Skip);
    let from = local("2026-03-28T12:00", "Europe/Berlin");
    let next: Vec<SystemTime> = strict.upcoming(from).take(2).collect();
    assert_eq!(
        next,
        [utc("2026-03-30T00:30:00Z"), utc("2026-03-31T00:30:00Z")]
    );
}

#[test]
fn berlin_daily_across_fall_back_runs_once() {
    // 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
    let cal = Calendar::new(
        "30 2 * * *",
        "Europe/Berlin",
        local("2026-10-24T12:00", "Europe/Berlin"),
    );
    cal.clock.advance(hours(48));
    assert_eq!(
        cal.runs(),
        [
            utc("2026-10-25T00:30:00Z"), // 02:30 CEST, the first pass; not 01:30Z as well
            utc("2026-10-26T01:30:00Z"), // 02:30 CET
        ]
    );
    assert!(cal.task.cancel());
}

#[test]
fn new_york_daily_across_both_changes() {
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT.
    let spring = Calendar::new(
        "30 2 * * *",
        "America/New_York",
        local("2026-03-07T12:00", "America/New_York"),
    );
    spring.clock.advance(hours(48));
    assert_eq!(
        spring.runs(),
        [
            utc("2026-03-08T07:00:00Z"), // 03:00 EDT, after the gap
            utc("2026-03-09T06:30:00Z"), // 02:30 EDT
        ]
    );
    // 2026-11-01: 02:00 EDT goes back to 01:00 EST; 01:30 happens twice.
    let fall = Calendar::new(
        "30 1 * * *",
        "America/New_York",
        local("2026-10-31T12:00", "America/New_York"),
    );
    fall.clock.advance(hours(48));
    assert_eq!(
        fall.runs(),
        [
            utc("2026-11-01T05:30:00Z"), // 01:30 EDT only
            utc("2026-11-02T06:30:00Z"), // 01:30 EST the next day
        ]
    );
}

#[test]
fn a_cadence_keeps_real_time_through_both_changes() {
    // Hourly in Berlin: the skipped hour has no 02:00, the repeated one has two; in UTC it
    // is one run an hour, none twice.
    let spring = Calendar::new(
        "0 * * * *",
        "Europe/Berlin",
        local("2026-03-29T00:30", "Europe/Berlin"),
    );
    spring.clock.advance(hours(4));
    let hourly = |from: &str, n: u32| -> Vec<SystemTime> {
        (0..n).map(|k| utc(from) + hours(1) * k).collect()
    };
    assert_eq!(spring.runs(), hourly("2026-03-29T00:00:00Z", 4));
    let fall = Calendar::new(
        "0 * * * *",
        "Europe/Berlin",
        local("2026-10-25T00:30", "Europe/Berlin"),
    );
    fall.clock.advance(hours(5));
    // 01:00 CEST, 02:00 CEST, 02:00 CET, 03:00 CET, 04:00 CET.
    assert_eq!(fall.runs(), hourly("2026-10-24T23:00:00Z", 5));
    // Half past every hour: 02:30 CET does not exist and is not run (a cadence, not a time).
    let half = Calendar::new(
        "30 * * * *",
        "Europe/Berlin",
        local("2026-03-29T01:00", "Europe/Berlin"),
    );
    half.clock.advance(hours(2));
    assert_eq!(
        half.runs(),
        [utc("2026-03-29T00:30:00Z"), utc("2026-03-29T01:30:00Z")]
    );
}

#[test]
fn february_29_and_the_last_day_of_the_month() {
    let leap = Cron::parse("0 0 29 2 *", "Europe/Berlin").unwrap();
    let from = local("2026-06-01T00:00", "Europe/Berlin");
    let next: Vec<SystemTime> = leap.upcoming(from).take(2).collect();
    assert_eq!(
        next,
        [
            local("2028-02-29T00:00", "Europe/Berlin"),
            local("2032-02-29T00:00", "Europe/Berlin")
        ]
    );
    let cal = Calendar::new(
        "0 0 29 2 *",
        "Europe/Berlin",
        local("2028-02-28T23:58", "Europe/Berlin"),
    );
    cal.clock.advance(secs(300));
    assert_eq!(cal.runs(), [utc("2028-02-28T23:00:00Z")]);

    let last = Cron::parse("0 12 L * *", "Europe/Berlin").unwrap();
    let days: Vec<SystemTime> = last
        .upcoming(local("2027-01-10T00:00", "Europe/Berlin"))
        .take(4)
        .collect();
    let want = ["2027-01-31", "2027-02-28", "2027-03-31", "2027-04-30"]
        .map(|d| local(&format!("{d}T12:00"), "Europe/Berlin"));
    assert_eq!(days, want);
    let cal = Calendar::new(
        "0 12 L * *",
        "Europe/Berlin",
        local("2027-02-28T11:59", "Europe/Berlin"),
    );
    cal.clock.advance(secs(120));
    assert_eq!(cal.runs(), [local("2027-02-28T12:00", "Europe/Berlin")]);
}

#[test]
fn short_months_nearest_weekday_nth_weekday_and_seconds() {
    let next = |expr: &str, from: &str, n: usize| -> Vec<SystemTime> {
        let cron = Cron::parse(expr, "UTC").unwrap();
        cron.upcoming(utc(from)).take(n).collect()
    };
    // The 31st: only in months that have one.
    assert_eq!(
        next("0 0 31 * *", "2026-01-31T12:00:00Z", 2),
        [utc("2026-03-31T00:00:00Z"), utc("2026-05-31T00:00:00Z")]
    );
    // 15W: 2026-08-15 is a Saturday, so Friday the 14th.
    assert_eq!(
        next("0 0 15W 8 *", "2026-01-01T00:00:00Z", 1),
        [utc("2026-08-14T00:00:00Z")]
    );
    // 5#3: the third Friday of January 2026.
    assert_eq!(
        next("0 0 * 1 5#3", "2026-01-01T00:00:00Z", 1),
        [utc("2026-01-16T00:00:00Z")]
    );
    // Seconds: every 20 s.
    assert_eq!(
        next("*/20 * * * * *", "2026-01-01T00:00:05Z", 3),
        [
            utc("2026-01-01T00:00:20Z"),
            utc("2026-01-01T00:00:40Z"),
            utc("2026-01-01T00:01:00Z")
        ]
    );
}

#[test]
fn a_parse_error_names_each_bad_field_and_its_position() {
    let cases: [(&str, CronField, usize, &str); 8] = [
        ("60 * * * * *", CronField::Second, 1, "60"),
        ("60 0 * * *", CronField::Minute, 1, "60"),
        ("0 24 * * *", CronField::Hour, 2, "24"),
        ("0 0 32 * *", CronField::DayOfMonth, 3, "32"),
        ("0 0 1 13 *", CronField::Month, 4, "13"),
        ("0 0 * * MON-FRX", CronField::DayOfWeek, 5, "MON-FRX"),
        ("0 0 0 1 1 * 10000", CronField::Year, 7, "10000"),
        ("0 5-1x * * *", CronField::Hour, 2, "5-1x"),
    ];
    for (expr, field, position, text) in cases {
        let err = Cron::parse(expr, "UTC").expect_err(expr);
        assert_eq!(err.field(), Some(field), "{expr}: {err}");
        assert_eq!(err.position(), Some(position), "{expr}: {err}");
        assert_eq!(&expr[err.span().unwrap()], text, "{expr}");
        assert!(err.to_string().contains(&field.to_string()), "{err}");
        assert!(std::error::Error::source(&err).is_some(), "croner's reason");
    }
    let err = Cron::parse("* * *", "UTC").unwrap_err();
    assert!(err.is_field_count() && err.field().is_none());
    assert!(Cron::parse("", "UTC").unwrap_err().is_field_count());
    assert!(Cron::parse("0 3 * * *", "Europe/Berlim")
        .unwrap_err()
        .is_unknown_zone());
}

#[test]
fn a_stepped_wall_clock_replans_without_a_double_run() {
    let cal = Calendar::new("0 * * * *", "UTC", utc("2026-05-01T00:30:00Z"));
    cal.clock.advance(secs(30 * 60));
    assert_eq!(cal.runs(), [utc("2026-05-01T01:00:00Z")]);

    // Forward an hour and ten minutes, as NTP or a resume from suspend would: the 02:00
    // occurrence is now in the past. The task looks at the clock within a minute and runs it.
    cal.clock.set_system_time(utc("2026-05-01T02:10:00Z"));
    cal.clock.advance(secs(60));
    let runs = cal.runs();
    assert_eq!(runs.len(), 2, "the jumped-over occurrence ran, once");
    assert_eq!(
        runs[1],
        utc("2026-05-01T02:11:00Z"),
        "within a minute of the step"
    );

    // Back an hour: 02:00 comes round again on the wall clock, but it ran; the next run is 03:00.
    cal.clock.set_system_time(utc("2026-05-01T01:11:00Z"));
    cal.clock.advance(hours(2));
    assert_eq!(cal.clock.system_time(), utc("2026-05-01T03:11:00Z"));
    assert_eq!(&cal.runs()[2..], [utc("2026-05-01T03:00:00Z")]);
    assert!(cal.task.cancel());
}

#[test]
fn a_clock_stepped_back_before_the_first_run_moves_it_earlier() {
    // Scheduled at 02:30: the next run is 03:00. The clock goes back to 00:10; 01:00 is now the
    // next occurrence, and it runs on time, then 02:00 and 03:00 once each.
    let cal = Calendar::new("0 * * * *", "UTC", utc("2026-05-01T02:30:00Z"));
    cal.clock.set_system_time(utc("2026-05-01T00:10:00Z"));
    cal.clock.advance(hours(3));
    assert_eq!(
        cal.runs(),
        [
            utc("2026-05-01T01:00:00Z"),
            utc("2026-05-01T02:00:00Z"),
            utc("2026-05-01T03:00:00Z")
        ]
    );
}

#[test]
fn a_step_forward_over_several_occurrences_follows_missed_ticks() {
    let start = utc("2026-05-01T00:59:00Z");
    let at = |s: &str| utc(&format!("2026-05-01T{s}Z"));
    let burst = Calendar::with_policy("0 * * * *", "UTC", start, MissedTicks::Burst);
    let skip = Calendar::with_policy("0 * * * *", "UTC", start, MissedTicks::Skip);
    let delay = Calendar::with_policy("0 * * * *", "UTC", start, MissedTicks::Delay);
    for cal in [&burst, &skip, &delay] {
        cal.clock.advance(secs(60)); // runs 01:00
        cal.clock.set_system_time(at("04:30:00")); // over 02:00, 03:00 and 04:00
        cal.clock.advance(secs(60));
    }
    // The task looked at the clock a minute after its 01:00 run: at 04:31 by the new time.
    let late = at("04:31:00");
    // Burst: each missed one (02:00, 03:00, 04:00) at once.
    assert_eq!(burst.runs(), [at("01:00:00"), late, late, late]);
    // Skip: the one it was waiting for runs, the rest are dropped.
    assert_eq!(skip.runs(), [at("01:00:00"), late]);
    // Delay: the one it was waiting for, then one more for the rest.
    assert_eq!(delay.runs(), [at("01:00:00"), late, late]);
    for cal in [&burst, &skip, &delay] {
        cal.clock.advance(hours(1)); // to 05:31: 05:00 ran once, on time
        assert_eq!(cal.runs().last(), Some(&at("05:00:00")));
    }
}

#[test]
fn looks_at_the_clock_are_not_runs_and_the_task_stops_like_a_periodic_one() {
    let cal = Calendar::new("0 * * * *", "UTC", utc("2026-05-01T00:00:30Z"));
    cal.clock.advance(hours(3)); // some 180 looks at the clock, 3 runs
    assert_eq!(cal.runs().len(), 3);
    assert_eq!(cal.pool.stats().completed, 3);
    assert_eq!(cal.pool.stats().pending, 1);

    // A graceful shutdown stops it, as it stops fixed-rate tasks.
    cal.pool.shutdown();
    let mut task = cal.task;
    cal.clock.advance(hours(1));
    let end = task.join_timeout(LIMIT).expect("stopped in time");
    assert_eq!(end, Err(TaskError::Shutdown));
    assert!(cal.pool.await_termination(LIMIT));
}

#[test]
fn a_reset_runs_the_next_occurrence_early_then_the_calendar_goes_on() {
    let cal = Calendar::new("0 3 * * *", "UTC", utc("2026-05-01T00:00:00Z"));
    assert!(cal.task.reset(secs(10)));
    cal.clock.advance(secs(10));
    assert_eq!(cal.runs(), [utc("2026-05-01T00:00:10Z")]);
    cal.clock.advance(hours(27));
    assert_eq!(
        cal.runs()[1..],
        [utc("2026-05-02T03:00:00Z")],
        "03:00 on the 1st was the reset run"
    );
    assert!(cal.task.cancel());
}

/// Real time: a per-second expression runs within wide bounds after each second boundary,
/// never before it, and never twice for one second.
#[test]
fn per_second_runs_follow_the_wall_clock_never_early() {
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let every_second = Cron::parse("* * * * * *", "UTC").unwrap();
    let (tx, rx) = mpsc::channel();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let task = pool
        .schedule_cron(
            move || {
                c.fetch_add(1, SeqCst);
                let _ = tx.send(SystemTime::now());
            },
            &every_second,
        )
        .unwrap();
    let runs: Vec<Duration> = (0..4)
        .map(|_| {
            rx.recv_timeout(LIMIT)
                .expect("a run")
                .duration_since(UNIX_EPOCH)
                .unwrap()
        })
        .collect();
    assert!(task.cancel());
    for pair in runs.windows(2) {
        assert!(
            pair[1].as_secs() > pair[0].as_secs(),
            "two runs in one second: {pair:?}"
        );
    }
    for at in &runs {
        // An early run would land just before a boundary: 999 ms into the previous second.
        let into = Duration::from_nanos(u64::from(at.subsec_nanos()));
        assert!(
            into < Duration::from_millis(500),
            "{into:?} after the second boundary"
        );
    }
    assert_eq!(count.load(SeqCst), 4, "no run after the cancel returned");
}

/// A machine without the `tzdata` package (a slim container image) has no
/// `/usr/share/zoneinfo`; jiff then turns to the copy of the database compiled in (its
/// `tzdb-bundle-always`, which the `cron` feature turns on), and without that copy every zone
/// but UTC is unknown there. This checks the copy is in the build and knows the zones and the
/// rules the DST tests use (the system's copy, where there is one, is read first).
#[test]
fn the_binary_carries_a_time_zone_database_for_machines_without_one() {
    let bundled = jiff::tz::TimeZoneDatabase::bundled();
    for zone in ["Europe/Berlin", "America/New_York", "Asia/Tokyo"] {
        assert!(
            bundled.get(zone).is_ok(),
            "{zone} is not in the bundled database"
        );
    }
    let berlin = bundled.get("Europe/Berlin").unwrap();
    let gap_end = jiff::Timestamp::from_second(1_774_746_000).unwrap(); // 2026-03-29T01:00Z
    assert_eq!(gap_end.to_zoned(berlin).hour(), 3, "03:00 CEST");
}

#[test]
fn lists_and_ranges_of_hours_run_a_repeated_time_once() {
    // 2026-10-25 in Berlin: 03:00 CEST goes back to 02:00 CET. Times of day given as a list
    // or a range are times of day: each runs once, at its first pass.
    let from = local("2026-10-24T12:00", "Europe/Berlin");
    let list = Cron::parse("30 1,2 * * *", "Europe/Berlin").unwrap();
    let next: Vec<SystemTime> = list.upcoming(from).take(4).collect();
    assert_eq!(
        next,
        [
            utc("2026-10-24T23:30:00Z"), // 01:30 CEST
            utc("2026-10-25T00:30:00Z"), // 02:30 CEST, the first pass; not 01:30Z as well
            utc("2026-10-26T00:30:00Z"), // 01:30 CET
            utc("2026-10-26T01:30:00Z"), // 02:30 CET
        ]
    );
    let range = Cron::parse("0 1-3 * * *", "Europe/Berlin").unwrap();
    let next: Vec<SystemTime> = range.upcoming(from).take(4).collect();
    assert_eq!(
        next,
        [
            utc("2026-10-24T23:00:00Z"), // 01:00 CEST
            utc("2026-10-25T00:00:00Z"), // 02:00 CEST, once
            utc("2026-10-25T02:00:00Z"), // 03:00 CET
            utc("2026-10-26T00:00:00Z"), // 01:00 CET
        ]
    );
    // On a pool: the list runs 02:30 once across the night.
    let cal = Calendar::new("30 1,2 * * *", "Europe/Berlin", from);
    cal.clock.advance(hours(24));
    assert_eq!(
        cal.runs(),
        [utc("2026-10-24T23:30:00Z"), utc("2026-10-25T00:30:00Z")]
    );
    assert!(cal.task.cancel());
    // A cadence still runs in both passes: `30 * * * *` has 02:30 CEST and 02:30 CET.
    let cadence = Cron::parse("30 * * * *", "Europe/Berlin").unwrap();
    let night: Vec<SystemTime> = cadence
        .upcoming(local("2026-10-25T01:45", "Europe/Berlin"))
        .take(2)
        .collect();
    assert_eq!(
        night,
        [utc("2026-10-25T00:30:00Z"), utc("2026-10-25T01:30:00Z")]
    );
}
