//! Calendar schedules: **cron expressions in a time zone** (feature `cron`).
//!
//! Parse a [`Cron`] once, look at its next occurrences, and run a closure at each of them with
//! [`Handle::schedule_cron`](crate::Handle::schedule_cron):
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use wheelpool::cron::Cron;
//! use wheelpool::ScheduledThreadPool;
//!
//! let nightly = Cron::parse("0 3 * * *", "Europe/Berlin").unwrap(); // 03:00 every day, Berlin time
//! let next = nightly.next_after(SystemTime::now()).unwrap();
//! assert!(next > SystemTime::now());
//! assert!(next <= SystemTime::now() + Duration::from_secs(25 * 3600));
//!
//! let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
//! let task = pool.schedule_cron(|| println!("cleaning up"), &nightly).unwrap();
//! assert!(task.cancel());
//! ```
//!
//! # Expressions
//!
//! Five fields `minute hour day-of-month month day-of-week`, six with `second` first, seven
//! with `year` last; `*`, lists `1,15`, ranges `1-5`, steps `*/10`, names `JAN`-`DEC` and
//! `SUN`-`SAT`, `?` for "any" in the day fields, `L` (last day of the month, or `5L`: the last
//! Friday), `W` (`15W`: the weekday nearest the 15th), `#` (`5#3`: the third Friday) and the
//! nicknames `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`. As in Vixie cron, when both
//! day fields are restricted a day matching either runs (prefix the day-of-week with `+` to
//! require both). The 31st runs only in months that have one, `0 0 29 2 *` only in leap years.
//!
//! # Daylight saving time
//!
//! Occurrences are instants: each is a wall-clock time in the expression's zone, turned into
//! UTC with that zone's rules for that day. Where a zone's clock jumps:
//!
//! - **A skipped time runs at the first instant after the gap.** `30 2 * * *` in
//!   Europe/Berlin on the last Sunday of March, when 02:00 jumps to 03:00, runs at 03:00
//!   CEST. A nightly job must not silently lose a night (the reason Vixie cron and croner do
//!   this). A job for which a run at another hour is worse than none can say so:
//!   [`Cron::skipped_time`] with [`SkippedTime::Skip`]. Expressions with a wildcard or a step
//!   in the second, minute or hour field
//!   (`*/15 * * * *`, `0 * * * *`) are a cadence, not a time of day: the times inside the gap
//!   do not exist and are not run, and the cadence goes on after it.
//! - **A repeated time runs once, at its first pass.** `30 1 * * *` in America/New_York on
//!   the first Sunday of November, when 02:00 EDT goes back to 01:00 EST, runs at 01:30 EDT
//!   only; so do lists and ranges of times (`30 1,2 * * *`, `0 1-3 * * *` in Berlin run
//!   02:30 or 02:00 once on the night its clocks go back). A cadence keeps its real-time
//!   spacing through the repeated hour: `0 * * * *` runs at 01:00 EDT and again an hour
//!   later at 01:00 EST, each a distinct instant, never the same instant twice.
//!
//! This is the Open Cron Pattern Specification's rule, which croner implements; wheelpool
//! adds the wall clock (see [`Handle::schedule_cron`](crate::Handle::schedule_cron): runs are
//! never early by the system clock, a stepped clock moves the next run within a minute, and
//! no occurrence runs twice even when the clock goes back).
//!
//! # Why croner and jiff
//!
//! - [croner](https://docs.rs/croner) parses and evaluates the expressions: a full dialect
//!   (seconds, years, `L`, `W`, `#`, nicknames), the Open Cron Pattern Specification's DST
//!   rules written down and tested, actively released (4.x), and it evaluates on jiff's
//!   zoned times directly (its `jiff` feature), so we need no chrono. The other common
//!   choice, the `cron` crate, has a smaller dialect, works on chrono only, and leaves what
//!   happens at a DST change to whatever chrono-tz's conversions give.
//! - [jiff](https://docs.rs/jiff) brings the time zones: the IANA database, and explicit gap
//!   and fold handling. It reads the system's copy (`/usr/share/zoneinfo`, or `TZDIR`) when
//!   there is one, so zone rules follow the system's `tzdata` updates; a machine without one
//!   (a slim container image without the `tzdata` package) gets the copy compiled into the
//!   binary (jiff's `tzdb-bundle-always`, about 0.26 MB), instead of an unknown-zone error for
//!   every zone but UTC. The nodes of a cluster job (feature `postgres`) must read the same
//!   rules: give them the same `tzdata`, or none, so all use the bundled copy of one build. chrono would need chrono-tz, which compiles a copy of the database into the
//!   binary. We use jiff 0.2, the series croner 4 is built on.
//!
//! Neither appears in wheelpool's public API (instants are [`SystemTime`], zones are IANA
//! names), so their versions can move without breaking ours.

mod error;

pub use error::{CronError, CronField};

use croner::parser::CronParser;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use std::fmt;
use std::time::SystemTime;

/// A cron expression in a time zone, parsed and checked once: ask it for its next occurrences,
/// print it, and hand it to [`Handle::schedule_cron`](crate::Handle::schedule_cron).
///
/// See the [module docs](self) for the expression syntax and the daylight-saving rule.
/// Cheap to clone.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use wheelpool::cron::Cron;
///
/// let weekdays = Cron::parse("0 9 * * MON-FRI", "America/New_York").unwrap();
/// assert_eq!(weekdays.to_string(), "0 9 * * MON-FRI (America/New_York)");
///
/// // Friday 2026-01-02 15:00 UTC, 10:00 in New York: today's run has passed. Next come
/// // Monday 2026-01-05 09:00 EST (14:00 UTC), then Tuesday.
/// let friday = UNIX_EPOCH + Duration::from_secs(1_767_366_000);
/// let next: Vec<_> = weekdays.upcoming(friday).take(2).collect();
/// let monday = UNIX_EPOCH + Duration::from_secs(1_767_621_600);
/// assert_eq!(next, [monday, monday + Duration::from_secs(24 * 3600)]);
/// ```
#[derive(Clone)]
pub struct Cron {
    expr: String,
    zone_name: String,
    zone: TimeZone,
    pattern: croner::Cron,
    skipped: SkippedTime,
    /// No wildcard or step in the second, minute and hour fields: the expression names times
    /// of day, and a repeated one runs at its first pass only (see the module docs).
    times_of_day: bool,
}

/// What becomes of an occurrence whose wall-clock time a daylight-saving change skips (see
/// the [module docs](self)); set with [`Cron::skipped_time`].
///
/// # Examples
///
/// ```
/// use wheelpool::cron::SkippedTime;
///
/// assert_eq!(SkippedTime::default(), SkippedTime::RunAfterGap);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SkippedTime {
    /// Run at the first instant after the gap (`02:30` on the night 02:00 jumps to 03:00 runs
    /// at 03:00). The default: no night is lost.
    #[default]
    RunAfterGap,
    /// Do not run that day: the occurrence is dropped.
    Skip,
}

impl Cron {
    /// Parses `expr` (see the [module docs](self)) for the IANA time zone `zone`
    /// (`"Europe/Berlin"`, `"America/New_York"`, `"UTC"`).
    ///
    /// # Errors
    ///
    /// A [`CronError`] naming the bad field, its position and byte range; or saying the field
    /// count is wrong or the zone is unknown.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cron::{Cron, CronField};
    ///
    /// assert!(Cron::parse("*/10 * * * * *", "UTC").is_ok()); // every 10 seconds
    /// let err = Cron::parse("0 0 * * 8", "UTC").unwrap_err();
    /// assert_eq!((err.field(), err.position()), (Some(CronField::DayOfWeek), Some(5)));
    /// ```
    pub fn parse(expr: &str, zone: &str) -> Result<Cron, CronError> {
        let pattern = parse_pattern(expr)?;
        let tz = TimeZone::get(zone).map_err(|e| CronError::unknown_zone(zone, e))?;
        let p = &pattern.pattern;
        let times_of_day = [&p.seconds, &p.minutes, &p.hours]
            .iter()
            .all(|field| field.step == 1 && !field.from_wildcard);
        Ok(Cron {
            expr: expr.trim().to_owned(),
            zone_name: zone.to_owned(),
            zone: tz,
            pattern,
            skipped: SkippedTime::default(),
            times_of_day,
        })
    }

    /// Sets what becomes of an occurrence whose time a daylight-saving change skips (by
    /// default [`SkippedTime::RunAfterGap`]). Only expressions with a fixed second, minute
    /// and hour are affected: a cadence has no occurrence to move.
    ///
    /// # Examples
    ///
    /// On 2026-03-29 Berlin's clocks jump from 02:00 to 03:00: by default 02:30 runs at 03:00
    /// CEST (01:00 UTC); with `Skip` that night has no run.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use wheelpool::cron::{Cron, SkippedTime};
    ///
    /// let mar_28_noon_utc = UNIX_EPOCH + Duration::from_secs(1_774_699_200);
    /// let cron = Cron::parse("30 2 * * *", "Europe/Berlin").unwrap();
    /// let after_gap = UNIX_EPOCH + Duration::from_secs(1_774_746_000); // 2026-03-29T01:00Z
    /// assert_eq!(cron.next_after(mar_28_noon_utc), Some(after_gap));
    ///
    /// let strict = cron.skipped_time(SkippedTime::Skip);
    /// let next_night = UNIX_EPOCH + Duration::from_secs(1_774_830_600); // 2026-03-30T00:30Z
    /// assert_eq!(strict.next_after(mar_28_noon_utc), Some(next_night));
    /// ```
    pub fn skipped_time(mut self, rule: SkippedTime) -> Self {
        self.skipped = rule;
        self
    }

    /// The expression as given (trimmed).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cron::Cron;
    ///
    /// assert_eq!(Cron::parse(" @daily ", "UTC").unwrap().expression(), "@daily");
    /// ```
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The time zone's name, as given.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cron::Cron;
    ///
    /// assert_eq!(Cron::parse("@daily", "Asia/Tokyo").unwrap().zone(), "Asia/Tokyo");
    /// ```
    pub fn zone(&self) -> &str {
        &self.zone_name
    }

    /// The first occurrence strictly after `t`, or `None` if there is none (an expression
    /// whose dates never come, like `0 0 30 2 *`, or whose years are past).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use wheelpool::cron::Cron;
    ///
    /// let hourly = Cron::parse("0 * * * *", "UTC").unwrap();
    /// let t = UNIX_EPOCH + Duration::from_secs(3600);
    /// assert_eq!(hourly.next_after(t), Some(t + Duration::from_secs(3600)));
    /// assert_eq!(Cron::parse("0 0 30 2 *", "UTC").unwrap().next_after(t), None);
    /// ```
    pub fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        // Occurrences fall on whole seconds: strictly after `t` is at or after the second
        // that follows `t`'s own.
        let ts = Timestamp::try_from(t).ok()?;
        let next_second = Timestamp::from_second(ts.as_second().checked_add(1)?).ok()?;
        let start = if ts.as_second() < 0 && ts.subsec_nanosecond() != 0 {
            // Before 1970, `as_second` rounds towards zero, which is already the next second.
            Timestamp::from_second(ts.as_second()).ok()?
        } else {
            next_second
        };
        self.first_from(start)
    }

    /// The occurrences after `t`, in order (each strictly after the one before).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use wheelpool::cron::Cron;
    ///
    /// let cron = Cron::parse("0 0 L * *", "UTC").unwrap(); // midnight, last day of the month
    /// let jan_15_2028 = UNIX_EPOCH + Duration::from_secs(1_831_507_200);
    /// let days: Vec<u64> = cron
    ///     .upcoming(jan_15_2028)
    ///     .take(3)
    ///     .map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs())
    ///     .collect();
    /// // 2028-01-31, 2028-02-29 (a leap year) and 2028-03-31, at 00:00 UTC.
    /// assert_eq!(days, [1_832_889_600, 1_835_395_200, 1_838_073_600]);
    /// ```
    pub fn upcoming(&self, t: SystemTime) -> impl Iterator<Item = SystemTime> + '_ {
        std::iter::successors(self.next_after(t), move |&last| self.next_after(last))
    }

    /// The rule for occurrences in a daylight-saving gap (see [`skipped_time`](Self::skipped_time)):
    /// part of a cluster job's settings (feature `postgres`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn skipped_rule(&self) -> SkippedTime {
        self.skipped
    }

    /// True if `t`'s wall-clock time in the zone comes twice (a repeated hour when the clocks
    /// go back): where the occurrences croner finds depend on where the search starts.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn in_repeated_time(&self, t: SystemTime) -> bool {
        let Ok(ts) = Timestamp::try_from(t) else {
            return false;
        };
        let civil = ts.to_zoned(self.zone.clone()).datetime();
        self.zone.to_ambiguous_timestamp(civil).is_ambiguous()
    }

    /// The last occurrence at or before `t` (`None` if there is none).
    pub(crate) fn last_at_or_before(&self, t: SystemTime) -> Option<SystemTime> {
        let ts = Timestamp::try_from(t).ok()?;
        let floor = ts.as_second() - i64::from(ts.as_second() < 0 && ts.subsec_nanosecond() != 0);
        let mut start = Timestamp::from_second(floor)
            .ok()?
            .to_zoned(self.zone.clone());
        for _ in 0..SEARCHES {
            let found = self.pattern.find_previous_occurrence(&start, true).ok()?;
            if self.keeps(&found) {
                return Some(SystemTime::from(found.timestamp()));
            }
            start = found.checked_sub(jiff::SignedDuration::from_secs(1)).ok()?;
        }
        None
    }

    /// The first occurrence at or after `start`, a whole second.
    fn first_from(&self, start: Timestamp) -> Option<SystemTime> {
        let mut start = start.to_zoned(self.zone.clone());
        for _ in 0..SEARCHES {
            // An error means the search found nothing within croner's limits.
            let found = self.pattern.find_next_occurrence(&start, true).ok()?;
            if self.keeps(&found) {
                return Some(SystemTime::from(found.timestamp()));
            }
            start = found.checked_add(jiff::SignedDuration::from_secs(1)).ok()?;
        }
        None
    }

    /// False for an occurrence croner moved past a DST gap when the rule is to skip it (its
    /// wall-clock time is not one the expression names), and for the second pass of a
    /// repeated time of day. croner runs a repeated time once only when the second, minute
    /// and hour fields each hold one value; a list or a range of hours (`30 1,2 * * *`)
    /// would run 02:30 in both passes on a night the clocks go back, against the rule.
    fn keeps(&self, found: &jiff::Zoned) -> bool {
        let named = self.skipped == SkippedTime::RunAfterGap
            || self.pattern.is_time_matching(found).unwrap_or(true);
        named && !(self.times_of_day && self.is_second_pass(found))
    }

    /// True if `found`'s wall-clock time came once already, before the clocks went back.
    fn is_second_pass(&self, found: &jiff::Zoned) -> bool {
        match self.zone.to_ambiguous_timestamp(found.datetime()).offset() {
            jiff::tz::AmbiguousOffset::Fold { after, .. } => found.offset() == after,
            _ => false,
        }
    }
}

/// Searches one lookup may make while it skips occurrences moved past a gap: one suffices per
/// gap, and gaps are at least weeks apart; the bound only keeps a broken zone from looping.
const SEARCHES: usize = 8;

/// Parses with croner's default (OCPS) parser; on an error, finds the field to blame.
fn parse_pattern(expr: &str) -> Result<croner::Cron, CronError> {
    let fields = split_fields(expr);
    let nickname = expr.trim_start().starts_with('@');
    let layout = match CronField::layout(fields.len()) {
        Some(layout) => layout,
        None if nickname => &[],
        None => return Err(CronError::field_count(fields.len())),
    };
    let parser = CronParser::new();
    let err = match parser.parse(expr) {
        Ok(pattern) => return Ok(pattern),
        Err(err) => err,
    };
    // Try each field alone, every other field `*`: the first that fails on its own is the
    // one to blame (croner's own messages do not say which field they mean).
    for (i, (&field, (start, text))) in layout.iter().zip(&fields).enumerate() {
        let mut probe = ["*"; 7];
        probe[field.full_index()] = text;
        if let Err(alone) = parser.parse(&probe.join(" ")) {
            let span = *start..start + text.len();
            return Err(CronError::bad_field(field, i + 1, span, text, alone));
        }
    }
    Err(CronError::expression(err))
}

/// The whitespace-separated fields of `expr`, with their byte offsets.
fn split_fields(expr: &str) -> Vec<(usize, &str)> {
    let mut fields = Vec::new();
    let mut start = None;
    for (i, c) in expr.char_indices().chain([(expr.len(), ' ')]) {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                fields.push((s, &expr[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    fields
}

impl fmt::Display for Cron {
    /// `expression (zone)`, e.g. `0 3 * * * (Europe/Berlin)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.expr, self.zone_name)
    }
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cron")
            .field("expr", &self.expr)
            .field("zone", &self.zone_name)
            .field("skipped", &self.skipped)
            .finish()
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_their_byte_offsets() {
        assert_eq!(split_fields(" 0  9 *"), [(1, "0"), (4, "9"), (6, "*")]);
        assert!(split_fields("   ").is_empty());
    }

    #[test]
    fn next_after_is_strict_and_whole_seconds() {
        let every = Cron::parse("* * * * * *", "UTC").unwrap();
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(10);
        let half = std::time::Duration::from_millis(500);
        assert_eq!(every.next_after(t), Some(t + 2 * half));
        assert_eq!(every.next_after(t + half), Some(t + 2 * half));
        assert_eq!(every.last_at_or_before(t + half), Some(t));
        assert_eq!(every.last_at_or_before(t), Some(t));
    }
}
