//! Cron schedules of cluster jobs (features `postgres` and `cron`): which occurrence a node
//! claims, how long it stays claimable, and how a run is named.
//!
//! Ground rules:
//! - **A run is named by its occurrence's instant**, in nanoseconds since the Unix epoch: the
//!   store's `bigint` run column (good until 2262; occurrences fall on whole seconds). A cron
//!   job's row holds the grid [`CRON_GRID`] (period 1 ns, offset 0), so the statements and
//!   the chain that serve periodic jobs read its run numbers as instants: `last_run` is the
//!   latest occurrence claimed, it only grows, and a claim takes only an occurrence after it.
//!   So no instant is claimed twice, ever, by any node, whatever expression each node has:
//!   a rolling deploy that changes the expression cannot run an occurrence again.
//! - **The database does not evaluate cron expressions**: a node names the occurrence it
//!   claims (`want`) and the instant it stops being claimable (`until`: the next occurrence
//!   plus the misfire grace, the periodic rule for run `k`); the claim statement checks both,
//!   and that the occurrence is due, against the store's clock in the same atomic statement.
//!   A node's own wall clock is never read for a claim: its wake-ups are planned from its last
//!   reading of the store's clock, as for periodic jobs.
//! - **Occurrences are the ones [`Cron::next_after`] gives**, one after another from the row's
//!   last run (the in-process daylight-saving rule: a skipped time runs after the gap, or not
//!   at all with `SkippedTime::Skip`; a repeated time once), each found from the one before,
//!   starting at the row's last run: the chain every node follows. A look backwards (to jump
//!   over occurrences too old to claim) is a shortcut only: checked forwards, and not taken
//!   into a repeated hour, where the chain is walked instead. (croner's backward and forward
//!   searches agree in both Berlin change nights, as a unit test checks; the guard keeps a
//!   disagreement, in another zone or a later croner, from ever naming a run.)
//! - **Nodes agree on the expression and the zone through the row** (its `cron` column,
//!   compared as text; see [`settings`]); the zone's *rules* come from the time zone
//!   database each node reads, which the nodes must share (see the module docs).

use super::error::ClusterError;
use crate::cron::{Cron, SkippedTime};
use crate::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The grid (period, offset in ns) a cron job's row holds: run `k` is the instant `k` ns after
/// the epoch. No periodic job can have it (periods start at 1 ms), so a periodic node, or one
/// of a version before cron jobs, finds a cron job's row never matches its own settings.
pub(super) const CRON_GRID: (i64, i64) = (1, 0);

/// The nominal step of an expression with fewer than two occurrences left (it only sets the
/// defaults of the lease and the grace, and how often a refused node looks again).
const FALLBACK_STEP: Duration = Duration::from_secs(60);

/// How many occurrences a look forwards takes before it gives up on reaching one that is
/// still claimable (the backward shortcut failed): the next claim goes on from there.
const WALK: usize = 10_000;

/// A skipped stretch of occurrences is counted up to this many (one by one is how they are
/// found); a longer one counts as this many in the stats, and its last is still reported.
pub(super) const COUNT_CAP: u64 = 10_000;

/// A cron schedule as a cluster job uses it.
#[derive(Debug)]
pub(super) struct Occurrences {
    cron: Cron,
    settings: Arc<str>,
    step: Duration,
}

/// The job's settings as the row stores them, and as nodes compare them: the expression
/// with single spaces between its fields, the zone, and the rule for skipped times when it
/// is not the default (`0 3 * * * (Europe/Berlin)`, `30 2 * * * (Europe/Berlin; skip DST
/// gaps)`). The same schedule written another way (`MON` for `1`) is another setting.
pub(super) fn settings(cron: &Cron) -> String {
    let expr: Vec<&str> = cron.expression().split_whitespace().collect();
    let skip = match cron.skipped_rule() {
        SkippedTime::Skip => SKIP_GAPS,
        _ => "",
    };
    format!("{} ({}{skip})", expr.join(" "), cron.zone())
}

const SKIP_GAPS: &str = "; skip DST gaps";

/// The schedule that [`settings`] wrote, if this node can read it (its zone is known here).
pub(super) fn parse_settings(text: &str) -> Option<Cron> {
    let (expr, rest) = text.strip_suffix(')')?.rsplit_once(" (")?;
    let (zone, rule) = match rest.strip_suffix(SKIP_GAPS) {
        Some(zone) => (zone, SkippedTime::Skip),
        None => (rest, SkippedTime::RunAfterGap),
    };
    Some(Cron::parse(expr, zone).ok()?.skipped_time(rule))
}

impl Occurrences {
    /// The schedule of `cron`, with its step (the time between its next two occurrences, by
    /// this machine's clock: only defaults depend on it).
    ///
    /// # Errors
    ///
    /// [`ClusterError::InvalidJob`] if the expression has no occurrence after now.
    pub(super) fn new(cron: &Cron) -> Result<Self, ClusterError> {
        let first = cron.next_after(SystemTime::now()).ok_or_else(|| {
            ClusterError::InvalidJob(format!("the cron schedule {cron} has no occurrence left"))
        })?;
        let step = cron
            .next_after(first)
            .and_then(|second| second.duration_since(first).ok())
            .unwrap_or(FALLBACK_STEP);
        Ok(Self {
            cron: cron.clone(),
            settings: settings(cron).into(),
            step,
        })
    }

    /// The settings text (see [`settings`]).
    pub(super) fn settings(&self) -> &Arc<str> {
        &self.settings
    }

    /// The time between the next two occurrences when the job was scheduled.
    pub(super) fn step(&self) -> Duration {
        self.step
    }

    /// The first occurrence strictly after `after` (ns since the epoch).
    pub(super) fn next(&self, after: i64) -> Option<i64> {
        nanos(self.cron.next_after(time(after))?)
    }

    /// Until when occurrence `t` may be claimed: `grace` after the next occurrence (never,
    /// if none comes), as run `k` of a period may until `grace` after run `k + 1`.
    pub(super) fn deadline(&self, t: i64, grace: i64) -> i64 {
        self.next(t).map_or(i64::MAX, |n| n.saturating_add(grace))
    }

    /// The oldest occurrence after `after` still claimable at `now` (all ns since the epoch):
    /// the first whose [`deadline`](Self::deadline) is after `now`. `None`: the expression has
    /// no occurrence after `after`.
    pub(super) fn oldest_claimable(&self, after: i64, now: i64, grace: i64) -> Option<i64> {
        let first = self.next(after)?;
        if self.deadline(first, grace) > now {
            return Some(first);
        }
        // Too old. The claimable one is the last occurrence at or before `now - grace` (its
        // next comes after that); found backwards, accepted only if it is one forwards too.
        let horizon = now.saturating_sub(grace);
        if let Some(p) = self.last_at_or_before(horizon).filter(|&p| p > first) {
            let plain = !self.cron.in_repeated_time(time(p));
            if plain && self.next(p - 1) == Some(p) && self.deadline(p, grace) > now {
                return Some(p);
            }
        }
        let mut t = first;
        for _ in 0..WALK {
            match self.next(t) {
                Some(n) if self.deadline(t, grace) <= now => t = n,
                _ => break,
            }
        }
        Some(t)
    }

    /// The occurrences in `from..=to`: the first `one_by_one` of them, the last (if there
    /// are more), and how many there are (at most [`COUNT_CAP`]).
    pub(super) fn within(&self, from: i64, to: i64, one_by_one: usize) -> Within {
        let mut within = Within::default();
        let mut t = self.next(from.saturating_sub(1));
        while let Some(at) = t.filter(|&at| at <= to) {
            within.count += 1;
            if within.listed.len() < one_by_one {
                within.listed.push(at);
            } else {
                within.last = Some(at);
            }
            if within.count == COUNT_CAP {
                within.last = self.last_at_or_before(to).or(within.last);
                break;
            }
            t = self.next(at);
        }
        within
    }

    fn last_at_or_before(&self, t: i64) -> Option<i64> {
        nanos(self.cron.last_at_or_before(time(t))?)
    }
}

/// Occurrences found in a stretch: see [`Occurrences::within`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Within {
    pub(super) listed: Vec<i64>,
    pub(super) last: Option<i64>,
    pub(super) count: u64,
}

/// Nanoseconds since the epoch as a `SystemTime` (before the epoch: the epoch).
fn time(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns.max(0).unsigned_abs())
}

/// A `SystemTime` in nanoseconds since the epoch, if it fits the store's `bigint`.
fn nanos(t: SystemTime) -> Option<i64> {
    i64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_nanos()).ok()
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    /// `"2026-03-29T01:00:00Z"` in ns since the epoch.
    fn utc(s: &str) -> i64 {
        let ts: jiff::Timestamp = s.parse().unwrap();
        i64::try_from(ts.as_nanosecond()).unwrap()
    }

    fn occ(expr: &str, zone: &str) -> Occurrences {
        Occurrences::new(&Cron::parse(expr, zone).unwrap()).unwrap()
    }

    fn all(o: &Occurrences, from: &str, to: &str) -> Vec<i64> {
        o.within(utc(from), utc(to), usize::MAX).listed
    }

    #[test]
    fn settings_are_normalised_text_that_reads_back() {
        let cron = Cron::parse("  0  3 * *   * ", "Europe/Berlin").unwrap();
        assert_eq!(settings(&cron), "0 3 * * * (Europe/Berlin)");
        let strict = cron.skipped_time(SkippedTime::Skip);
        let text = settings(&strict);
        assert_eq!(text, "0 3 * * * (Europe/Berlin; skip DST gaps)");
        let back = parse_settings(&text).unwrap();
        assert_eq!(settings(&back), text);
        assert_eq!(back.skipped_rule(), SkippedTime::Skip);
        assert!(parse_settings("").is_none());
        assert!(parse_settings("0 3 * * * (Mars/Olympus)").is_none());
    }

    /// Berlin, spring forward (2026-03-29, 02:00 CET -> 03:00 CEST): 02:30 runs once, at
    /// 03:00 CEST (01:00Z), or not at all with `Skip`; the runs are named by those instants.
    #[test]
    fn berlin_spring_forward_names_the_run_after_the_gap() {
        let o = occ("30 2 * * *", "Europe/Berlin");
        let runs = all(&o, "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z");
        let want = [
            utc("2026-03-28T01:30:00Z"), // 02:30 CET
            utc("2026-03-29T01:00:00Z"), // the gap: 03:00 CEST
            utc("2026-03-30T00:30:00Z"), // 02:30 CEST
        ];
        assert_eq!(runs, want);
        let cron = Cron::parse("30 2 * * *", "Europe/Berlin").unwrap();
        let strict = Occurrences::new(&cron.skipped_time(SkippedTime::Skip)).unwrap();
        let runs = all(&strict, "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z");
        assert_eq!(runs, [want[0], want[2]]);
        // The night after the gap: the run after 01:00Z is the next night's.
        assert_eq!(o.next(want[1]), Some(want[2]));
    }

    /// Berlin, fall back (2026-10-25, 03:00 CEST -> 02:00 CET): 02:30 runs at its first pass
    /// (00:30Z) only, and no look backwards from inside the second pass takes 01:30Z.
    #[test]
    fn berlin_fall_back_runs_the_repeated_time_once() {
        let o = occ("30 2 * * *", "Europe/Berlin");
        let first_pass = utc("2026-10-25T00:30:00Z");
        let runs = all(&o, "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z");
        assert_eq!(runs, [first_pass, utc("2026-10-26T01:30:00Z")]);
        assert_eq!(o.next(first_pass), Some(utc("2026-10-26T01:30:00Z")));
        // Every node that claimed 00:30Z goes on to the next night, whatever its clock reads
        // during the repeated hour.
        for now in [
            "2026-10-25T00:40:00Z",
            "2026-10-25T01:35:00Z",
            "2026-10-25T02:10:00Z",
        ] {
            let next = o.oldest_claimable(first_pass, utc(now), 60 * S);
            assert_eq!(next, Some(utc("2026-10-26T01:30:00Z")), "{now}");
        }
        // A node that comes back in the second pass, with a grace too short for the first,
        // skips it to the next night: 01:30Z is no occurrence.
        let before = utc("2026-10-24T12:00:00Z");
        let late = o.oldest_claimable(before, utc("2026-10-26T01:35:00Z"), 60 * S);
        assert_eq!(late, Some(utc("2026-10-26T01:30:00Z")));
    }

    /// A cadence keeps real-time spacing through both changes: hourly runs are an hour apart
    /// in UTC, 23 on the short day and 25 on the long one, each instant once.
    #[test]
    fn an_hourly_cadence_in_berlin_has_23_and_25_runs_on_the_change_days() {
        let o = occ("0 * * * *", "Europe/Berlin");
        let spring = all(&o, "2026-03-28T23:00:00Z", "2026-03-29T21:59:59Z");
        let autumn = all(&o, "2026-10-24T22:00:00Z", "2026-10-25T22:59:59Z");
        assert_eq!((spring.len(), autumn.len()), (23, 25));
        for day in [spring, autumn] {
            assert!(day.windows(2).all(|w| w[1] - w[0] == 3600 * S), "{day:?}");
        }
    }

    /// The oldest claimable occurrence by walking the chain one occurrence at a time.
    fn walked(o: &Occurrences, after: i64, now: i64, grace: i64) -> Option<i64> {
        let mut t = o.next(after)?;
        while o.deadline(t, grace) <= now {
            t = o.next(t)?;
        }
        Some(t)
    }

    /// The backward shortcut finds what walking the chain finds, for every minute of both
    /// Berlin change nights, for fixed times, times in the repeated hour and a cadence, and
    /// graces from none to an hour, after a node was away for two days.
    #[test]
    fn the_shortcut_agrees_with_the_chain_across_both_berlin_changes() {
        let exprs = ["30 2 * * *", "30 1,2 * * *", "*/20 * * * *", "0 3 * * *"];
        for expr in exprs {
            let o = occ(expr, "Europe/Berlin");
            for night in ["2026-03-28T22:00:00Z", "2026-10-24T22:00:00Z"] {
                // The last run two days before: the night's first occurrences are too old
                // for the shorter graces, so the shortcut is taken.
                let after = utc(night) - 2 * 86_400 * S;
                for minute in 0..8 * 60 {
                    let now = utc(night) + minute * 60 * S;
                    for grace in [0, 60 * S, 3600 * S] {
                        let fast = o.oldest_claimable(after, now, grace);
                        let slow = walked(&o, after, now, grace);
                        assert_eq!(
                            fast, slow,
                            "{expr} after {night}, +{minute} min, grace {grace}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_oldest_claimable_occurrence_follows_the_grace() {
        let o = occ("* * * * * *", "UTC"); // every second
        let t0 = utc("2026-01-01T00:00:00Z");
        // On time: the next second.
        assert_eq!(o.oldest_claimable(t0, t0 + S / 2, 3 * S), Some(t0 + S));
        // Back after 10 s with a 3 s grace: second t is claimable until t + 1 s + 3 s, so
        // the oldest one at t0 + 10.5 s is t0 + 7 s (its deadline t0 + 11 s).
        let now = t0 + 10 * S + S / 2;
        assert_eq!(o.oldest_claimable(t0, now, 3 * S), Some(t0 + 7 * S));
        assert_eq!(o.deadline(t0 + 7 * S, 3 * S), t0 + 11 * S);
        // After a week away: found without walking a week of seconds.
        let week = t0 + 7 * 86_400 * S;
        assert_eq!(o.oldest_claimable(t0, week, 0), Some(week));
        assert_eq!(o.oldest_claimable(t0, week - 1, 0), Some(week - S));
        // The skipped ones in between: listed, the last, and counted.
        let gap = o.within(t0 + S, t0 + 6 * S, 2);
        assert_eq!(gap.listed, [t0 + S, t0 + 2 * S]);
        assert_eq!((gap.last, gap.count), (Some(t0 + 6 * S), 6));
        let huge = o.within(t0 + S, t0 + 86_400 * S, 3);
        assert_eq!((huge.count, huge.last), (COUNT_CAP, Some(t0 + 86_400 * S)));
        // No occurrence left.
        let past = occ("0 0 0 1 1 * 2030", "UTC");
        assert_eq!(past.next(utc("2030-01-01T00:00:00Z")), None);
        assert_eq!(past.deadline(utc("2030-01-01T00:00:00Z"), 0), i64::MAX);
    }
}
