//! Calendar schedules: cron expressions in time zones (feature `cron`).
//!
//! - A nightly cleanup at 03:00 in Berlin and a report at 09:00 on weekdays in New York: parsed
//!   once, their next runs printed in their own zone and in UTC; then the nightly job's runs
//!   around the March 2027 daylight-saving change, where its UTC time moves by an hour.
//! - Both are scheduled on a pool (they would run at those times; here they are cancelled).
//! - A per-second expression runs for three seconds, each run a few milliseconds after the
//!   second boundary, never before it.
//!
//! Run with `cargo run --example cron_jobs --features cron`. It finishes in about 4 s.

use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use wheelpool::cron::Cron;
use wheelpool::ScheduledThreadPool;

/// How many per-second runs to watch.
const PER_SECOND_RUNS: usize = 3;

/// `t` as a date and time in `cron`'s zone, and in UTC.
fn show(t: SystemTime, cron: &Cron) -> String {
    let ts = jiff::Timestamp::try_from(t).expect("a time jiff can hold");
    let local = ts.in_tz(cron.zone()).expect("a zone the Cron accepted");
    format!(
        "{}  ({} UTC)",
        local.strftime("%a %Y-%m-%d %H:%M:%S %Z"),
        ts.strftime("%Y-%m-%d %H:%M")
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nightly = Cron::parse("0 3 * * *", "Europe/Berlin")?;
    let weekdays = Cron::parse("0 9 * * MON-FRI", "America/New_York")?;

    let now = SystemTime::now();
    for cron in [&nightly, &weekdays] {
        println!("{cron}: next runs");
        for t in cron.upcoming(now).take(5) {
            println!("    {}", show(t, cron));
        }
    }
    let before_dst: jiff::Timestamp = "2027-03-26T12:00:00Z".parse()?;
    println!("{nightly}: around the change to summer time on 2027-03-28");
    for t in nightly.upcoming(before_dst.into()).take(4) {
        println!("    {}", show(t, &nightly));
    }
    // A typo is caught at parse time, with the field to blame.
    if let Err(err) = Cron::parse("0 9 * * MON-FRY", "America/New_York") {
        println!("refused: {err}");
    }

    let pool = ScheduledThreadPool::builder().threads(2).build()?;
    let cleanup = pool.schedule_cron(|| println!("nightly cleanup"), &nightly)?;
    let report = pool.schedule_cron(|| println!("weekday report"), &weekdays)?;

    // Every second, on the second (six fields: seconds first).
    let every_second = Cron::parse("* * * * * *", "UTC")?;
    let (tx, rx) = mpsc::channel();
    let ticker = pool.schedule_cron(
        move || {
            let _ = tx.send(SystemTime::now());
        },
        &every_second,
    )?;
    for _ in 0..PER_SECOND_RUNS {
        let at = rx.recv_timeout(Duration::from_secs(5))?;
        let at = jiff::Timestamp::try_from(at)?;
        println!(
            "per-second run at {}: {} us after the second began",
            at.strftime("%H:%M:%S%.6f UTC"),
            at.subsec_microsecond()
        );
    }

    for task in [ticker, cleanup, report] {
        task.cancel();
    }
    pool.shutdown();
    assert!(pool.await_termination(Duration::from_secs(5)));
    Ok(())
}
