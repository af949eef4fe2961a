//! Where time comes from: the system clock, or a [`ManualClock`] that tests move by hand.
//!
//! Every time the pool handles goes through [`TimeBase`]: nanoseconds since the pool's origin
//! (saturating at `u64::MAX`, which means "never") and ticks of the wheel. Deadlines round *up*
//! to the next tick and "now" rounds *down*, so a task never fires before its deadline.

use crate::sync::os::monotonic_nanos;
use crate::sync::{Arc, AtomicU64, Mutex, Ordering, Weak};
use std::fmt;
use std::time::{Duration, Instant, SystemTime};

/// A pool attached to a manual clock: `advance` asks it to run what is due and report its next
/// deadline.
pub(crate) trait ClockListener: Send + Sync {
    /// Runs every task due at the clock's current time, waits until they (and what they
    /// scheduled for now) have finished, and returns the earliest deadline still pending.
    fn settle(&self) -> Option<Instant>;
    /// Time moved without a settle (an `advance` from inside a task): look at the clock again.
    fn time_moved(&self);
    /// A count that grows whenever the pool takes in work (an insert into a wheel, or a task
    /// handed to the workers): unchanged since a settle means nothing new came in since.
    fn activity(&self) -> u64;
}

/// Virtual time for tests: it stands still until [`advance`](ManualClock::advance).
///
/// Pass a clone to [`Builder::clock`](crate::Builder::clock). Every pool built with it measures
/// delays on this time line, and [`now`](ManualClock::now) gives the `Instant` that
/// [`schedule_at`](crate::Handle::schedule_at) expects.
///
/// # Examples
///
/// ```
/// use wheelpool::{ManualClock, ScheduledThreadPool};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let pool = ScheduledThreadPool::builder().threads(2).clock(clock.clone()).build().unwrap();
/// let runs = Arc::new(AtomicUsize::new(0));
/// let r = runs.clone();
/// let beat = pool
///     .schedule_at_fixed_rate(move || { r.fetch_add(1, Ordering::SeqCst); },
///                             Duration::from_millis(10), Duration::from_millis(10))
///     .unwrap();
/// clock.advance(Duration::from_millis(100));
/// assert_eq!(runs.load(Ordering::SeqCst), 10); // 10, 20, ..., 100 ms: all ran before advance returned
/// beat.cancel();
/// ```
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

struct ManualInner {
    base: Instant,
    /// Nanoseconds since `base`; only grows.
    offset: AtomicU64,
    /// The virtual wall clock's reading at `base` (it reads this plus `offset`); moved only by
    /// `set_system_time`.
    wall_base: Mutex<SystemTime>,
    listeners: Mutex<Vec<Weak<dyn ClockListener>>>,
    /// One `advance` at a time walks the deadlines.
    advancing: Mutex<()>,
}

crate::sync::thread_local! {
    /// On a thread of a pool that runs on a manual clock: that clock's address (0 elsewhere). An
    /// `advance` of that clock from a task must not wait for the pool it runs on; an advance of
    /// another clock, or from a pool on the system clock, waits as usual.
    static ON_POOL_THREAD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks the current thread as a thread (worker or timer thread) of a pool on `clock`, and on
/// the system clock asks for precise timed sleeps ([`precise_sleeps`]).
pub(crate) fn mark_pool_thread(clock: &Clock) {
    match clock {
        Clock::Manual(m) => ON_POOL_THREAD.with(|c| c.set(m.id())),
        Clock::System => precise_sleeps(),
    }
}

/// Asks the kernel to end the calling thread's timed sleeps within 1 us of when they were
/// asked to, instead of Linux's default 50 us: the timer thread and the watching worker park
/// until a deadline, and those 50 us were most of a lone timer's lateness. The pool batches
/// dense deadlines itself (its adaptive slack, see `timer/mod.rs`), so the kernel's batching
/// buys nothing here. A task's own sleeps on a worker are precise too. Elsewhere than Linux,
/// and if the kernel refuses, nothing changes.
fn precise_sleeps() {
    #[cfg(target_os = "linux")]
    {
        // The kernel's timer slack for this thread: how much later than asked a timed sleep
        // may end so the kernel can batch wake-ups (50 us by default).
        let slack = std::num::NonZeroU64::new(1_000);
        // An error only keeps the default slack: lateness as before, nothing else.
        let _ = rustix::thread::set_current_timer_slack(slack);
    }
}

impl ManualClock {
    /// A clock standing at the moment it was created.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ManualClock;
    /// use std::time::Instant;
    ///
    /// let before = Instant::now();
    /// let clock = ManualClock::new();
    /// let after = Instant::now();
    /// assert!(before <= clock.now() && clock.now() <= after);
    /// ```
    pub fn new() -> Self {
        Self::starting_at(SystemTime::now())
    }

    /// A clock standing at the moment it was created, whose virtual wall clock reads `wall`.
    ///
    /// The wall clock is what calendar schedules (feature `cron`) plan by: it moves with
    /// every [`advance`](ManualClock::advance), so a test can start just before a
    /// daylight-saving change and cross it in microseconds, and
    /// [`set_system_time`](ManualClock::set_system_time) steps it the way NTP or a suspend
    /// steps a real one.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ManualClock;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let new_year_2030 = UNIX_EPOCH + Duration::from_secs(1_893_456_000);
    /// let clock = ManualClock::starting_at(new_year_2030);
    /// assert_eq!(clock.system_time(), new_year_2030);
    /// clock.advance(Duration::from_secs(90));
    /// assert_eq!(clock.system_time(), new_year_2030 + Duration::from_secs(90));
    /// ```
    pub fn starting_at(wall: SystemTime) -> Self {
        ManualClock {
            inner: Arc::new(ManualInner {
                base: Instant::now(),
                offset: AtomicU64::new(0),
                wall_base: Mutex::new(wall),
                listeners: Mutex::new(Vec::new()),
                advancing: Mutex::new(()),
            }),
        }
    }

    /// The virtual wall clock: where it started ([`starting_at`](ManualClock::starting_at), or
    /// the system's time when the clock was created by [`new`](ManualClock::new)), plus every
    /// advance, plus every step of [`set_system_time`](ManualClock::set_system_time).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ManualClock;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let clock = ManualClock::starting_at(UNIX_EPOCH);
    /// clock.advance(Duration::from_millis(1500));
    /// assert_eq!(clock.system_time(), UNIX_EPOCH + Duration::from_millis(1500));
    /// ```
    pub fn system_time(&self) -> SystemTime {
        let base = *self.inner.wall_base.lock();
        let elapsed = Duration::from_nanos(self.offset_now());
        base.checked_add(elapsed).unwrap_or(base)
    }

    /// Steps the virtual wall clock to `t`, forwards or backwards, without moving the
    /// monotonic time that delays are measured on: what NTP, a suspend or an administrator
    /// does to a real system clock. Calendar tasks see the step at their next look at the
    /// wall clock, within a minute of (advanced) time.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ManualClock;
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let clock = ManualClock::starting_at(UNIX_EPOCH + Duration::from_secs(7200));
    /// let now = clock.now();
    /// clock.set_system_time(UNIX_EPOCH + Duration::from_secs(3600)); // back an hour
    /// assert_eq!(clock.system_time(), UNIX_EPOCH + Duration::from_secs(3600));
    /// assert_eq!(clock.now(), now, "monotonic time did not move");
    /// ```
    pub fn set_system_time(&self, t: SystemTime) {
        let mut base = self.inner.wall_base.lock();
        let elapsed = Duration::from_nanos(self.offset_now());
        *base = t.checked_sub(elapsed).unwrap_or(t);
    }

    /// The clock's current time: where it was created plus every
    /// [`advance`](ManualClock::advance) so far. Clones share one time line.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ManualClock;
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let start = clock.now();
    /// assert_eq!(clock.now(), start, "time stands still");
    /// let other = clock.clone();
    /// other.advance(Duration::from_millis(5));
    /// assert_eq!(clock.now() - start, Duration::from_millis(5));
    /// ```
    pub fn now(&self) -> Instant {
        // Acquire: pairs with the Release of `set_offset` / the AcqRel of an in-task advance.
        add_nanos(self.inner.base, self.inner.offset.load(Ordering::Acquire))
    }

    /// Moves time forward by `by`, stepping through each pending deadline in order, and returns
    /// once every task due by the new time has run, periodic re-arms included.
    ///
    /// At each step the clock stands exactly at that deadline while its tasks run, so tasks see
    /// `now()` equal to their planned time. A task that blocks forever makes `advance` wait
    /// forever: use timeouts inside tasks under test.
    ///
    /// Called from inside a task running on a pool that uses this clock, `advance` only moves
    /// the time (it cannot wait for the pool it runs on); the outer `advance` then carries on
    /// from the new time. From any other thread (a pool on another clock included) it waits as
    /// described above. With several pools on one clock, work one hands to another is run at
    /// its own deadline too. Total time saturates some 584 years after the clock was created.
    ///
    /// # Examples
    ///
    /// Three one-shots due at 10, 20 and 30 ms; advancing by 25 ms runs exactly the first
    /// two, each seeing the clock at its own deadline:
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let start = clock.now();
    /// let pool = ScheduledThreadPool::builder().threads(2).clock(clock.clone()).build().unwrap();
    /// // Each task returns the clock's reading when it runs.
    /// let at = |t: u64| {
    ///     let c = clock.clone();
    ///     pool.schedule(move || c.now() - start, ms(t)).unwrap()
    /// };
    /// let (t10, t20, t30) = (at(10), at(20), at(30));
    ///
    /// clock.advance(ms(25)); // returns once the 10 and 20 ms tasks have run
    /// assert_eq!(clock.now() - start, ms(25));
    /// assert!(t10.is_done() && t20.is_done());
    /// assert!(!t30.is_done());
    /// assert_eq!(t10.join(), Ok(ms(10)));
    /// assert_eq!(t20.join(), Ok(ms(20)));
    ///
    /// clock.advance(ms(5));
    /// assert!(t30.is_done());
    /// assert_eq!(t30.join(), Ok(ms(30)));
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = duration_nanos(by);
        if ON_POOL_THREAD.with(|c| c.get()) == self.id() {
            // Read-modify-write, so concurrent advances from tasks add up.
            let _ = self
                .inner
                .offset
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
                    Some(o.saturating_add(by))
                });
            for l in self.listeners() {
                l.time_moved();
            }
            return;
        }
        let _one_at_a_time = self.inner.advancing.lock();
        // The target is read under the lock: two threads advancing by 1 ms each move 2 ms.
        let target = self.offset_now().saturating_add(by);
        loop {
            let next = self.settle_all();
            match next.map(|at| self.offset_of(at)) {
                Some(at) if at <= target && at > self.offset_now() => self.set_offset(at),
                // Due but not run: the pool has more to settle at this time. At the very end of
                // time a deadline that saturated can never come due: stop there.
                Some(at) if at <= self.offset_now() && self.offset_now() < u64::MAX => continue,
                _ => break,
            }
        }
        self.set_offset(target);
        // Always once more at the target: with several pools on one clock, a task of one may
        // have handed work to another after that one had settled.
        self.settle_all();
    }

    /// Tells this clock apart from others (its shared state's address).
    fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    pub(crate) fn register(&self, listener: Weak<dyn ClockListener>) {
        let mut listeners = self.inner.listeners.lock();
        listeners.retain(|l| l.strong_count() > 0);
        listeners.push(listener);
    }

    fn listeners(&self) -> Vec<Arc<dyn ClockListener>> {
        self.inner
            .listeners
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Settles every live pool; the earliest of their next deadlines. With several pools, a task
    /// of one may hand work to another that has already settled in this round: rounds repeat
    /// until one passes in which no pool took in work after its own settle.
    fn settle_all(&self) -> Option<Instant> {
        let listeners = self.listeners();
        loop {
            let mut next = None;
            let mut seen = Vec::with_capacity(listeners.len());
            for l in &listeners {
                next = match (next, l.settle()) {
                    (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                    (a, b) => a.or(b),
                };
                seen.push(l.activity());
            }
            let quiet = listeners.iter().zip(&seen).all(|(l, &a)| l.activity() == a);
            if listeners.len() <= 1 || quiet {
                return next;
            }
        }
    }

    fn offset_now(&self) -> u64 {
        // Acquire: pairs with the Release of `set_offset`.
        self.inner.offset.load(Ordering::Acquire)
    }

    fn offset_of(&self, at: Instant) -> u64 {
        duration_nanos(at.saturating_duration_since(self.inner.base))
    }

    fn set_offset(&self, nanos: u64) {
        // Release: tasks that read `now()` after being woken see at least this time.
        self.inner.offset.fetch_max(nanos, Ordering::Release);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("elapsed", &Duration::from_nanos(self.offset_now()))
            .finish_non_exhaustive()
    }
}

/// The pool's clock.
#[derive(Clone, Debug)]
pub(crate) enum Clock {
    System,
    Manual(ManualClock),
}

impl Clock {
    pub(crate) fn now(&self) -> Instant {
        match self {
            Clock::System => Instant::now(),
            Clock::Manual(m) => m.now(),
        }
    }

    pub(crate) fn is_manual(&self) -> bool {
        matches!(self, Clock::Manual(_))
    }

    /// The manual clock, if it is one.
    pub(crate) fn manual(&self) -> Option<&ManualClock> {
        match self {
            Clock::System => None,
            Clock::Manual(m) => Some(m),
        }
    }
}

/// Calendar tasks read the wall clock here: the system's, or the manual clock's virtual one.
#[cfg(feature = "cron")]
impl crate::task::calendar::WallClock for Clock {
    fn wall_now(&self) -> SystemTime {
        match self {
            Clock::System => SystemTime::now(),
            Clock::Manual(m) => m.system_time(),
        }
    }
}

/// The pool's time line: its clock, its origin, and its tick.
///
/// # Reading the system clock
///
/// On Linux the system clock's "now" is read straight from the monotonic clock
/// (glibc's `clock_gettime(CLOCK_MONOTONIC)`, `sync/os.rs`), not through
/// `Instant::now()` and a subtraction of two `Instant`s: 17 against 23 ns on the 2-core VM,
/// and every schedule, run and poll reads it. `std` documents that its `Instant` reads that
/// same clock on Linux. The two time lines are tied so that nothing can fire early, even if they
/// were to differ:
/// - `raw_origin` is read *after* `origin`, within 1 us of it ([`system_origins`]), so a raw
///   "now" never runs ahead of the `Instant` one. An `Instant` a caller gives (`schedule_at`)
///   is converted from `origin` exactly, so it fires at most that gap (tens of nanoseconds)
///   late, never early; and whether it is due already is decided against an `Instant` "now"
///   ([`now_nanos_exact`](Self::now_nanos_exact)), so one already come runs at once.
/// - A sleep until a time line's instant ([`wake_instant`](Self::wake_instant)) is measured
///   from a raw reading and then an `Instant::now()`, in that order, so it never ends before
///   the raw clock has reached that instant.
/// - An instant reported to a caller ([`instant_of`](Self::instant_of), a handed-back task's
///   deadline) is `origin` plus the nanoseconds, the exact inverse of the conversion above: a
///   task scheduled at an `Instant` reports that very `Instant`.
///
/// Elsewhere, on a manual clock and under loom, everything goes through `Instant`.
#[derive(Debug)]
pub(crate) struct TimeBase {
    pub(crate) clock: Clock,
    origin: Instant,
    /// The monotonic clock's reading in nanoseconds, taken just after `origin`; `None` where
    /// "now" is read through `Instant` (see above).
    raw_origin: Option<u64>,
    tick_nanos: u64,
}

impl TimeBase {
    /// `tick` is clamped to at least 1 ns (the builder refuses zero before this).
    pub(crate) fn new(clock: Clock, tick: Duration) -> Self {
        let (origin, raw_origin) = match clock {
            Clock::System => system_origins(),
            Clock::Manual(_) => (clock.now(), None),
        };
        TimeBase {
            clock,
            origin,
            raw_origin,
            tick_nanos: duration_nanos(tick).max(1),
        }
    }

    /// Now, in nanoseconds since the origin. Time stops one nanosecond short of `u64::MAX`,
    /// which means "never": a deadline that saturated there never comes due, whatever the tick.
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        match self.raw_origin {
            Some(origin) => monotonic_nanos()
                .map_or(0, |now| now.saturating_sub(origin))
                .min(u64::MAX - 1),
            None => self.now_nanos_exact(),
        }
    }

    /// Now read through the pool's `Instant` clock, to compare with a caller's `Instant`: at or
    /// ahead of [`now_nanos`](Self::now_nanos) by at most the origins' gap (see "Reading the
    /// system clock"), so `schedule_at(Instant::now())` is due at once. A read slower by the
    /// `Instant` conversion.
    #[inline]
    pub(crate) fn now_nanos_exact(&self) -> u64 {
        self.nanos_of(self.clock.now()).min(u64::MAX - 1)
    }

    /// `at` in nanoseconds since the origin; an instant before the origin is 0.
    pub(crate) fn nanos_of(&self, at: Instant) -> u64 {
        duration_nanos(at.saturating_duration_since(self.origin))
    }

    /// The instant `nanos` after the origin (saturating far in the future): what a caller is
    /// told, the exact inverse of [`nanos_of`](Self::nanos_of).
    pub(crate) fn instant_of(&self, nanos: u64) -> Instant {
        add_nanos(self.origin, nanos)
    }

    /// An instant to sleep until so as to wake no earlier than `nanos` on this time line (now,
    /// if that has come). On the raw clock it is measured from now: read the raw clock first,
    /// then `Instant::now()`, so the sleep ends no earlier than `nanos` whatever the two clocks'
    /// offset (see "Reading the system clock" above).
    pub(crate) fn wake_instant(&self, nanos: u64) -> Instant {
        if self.raw_origin.is_none() {
            return self.instant_of(nanos);
        }
        let now = self.now_nanos();
        add_nanos(Instant::now(), nanos.saturating_sub(now))
    }

    /// The first tick at or after `nanos`: a deadline is never rounded down.
    pub(crate) fn tick_ceil(&self, nanos: u64) -> u64 {
        nanos.div_ceil(self.tick_nanos)
    }

    /// The last tick at or before `nanos`: the tick "now" is in.
    pub(crate) fn tick_floor(&self, nanos: u64) -> u64 {
        nanos / self.tick_nanos
    }

    /// The start of `tick`, in nanoseconds since the origin (saturating).
    pub(crate) fn nanos_of_tick(&self, tick: u64) -> u64 {
        tick.saturating_mul(self.tick_nanos)
    }
}

/// The system clock's two origins: an `Instant`, and the raw monotonic reading taken just after
/// it (`None` where "now" is read through `Instant`). The raw one never precedes the `Instant`,
/// and follows it by at most [`ORIGINS_APART`] unless every try was held up (then by the least
/// gap seen): a caller's `Instant` fires that much late at most, and `schedule_at(Instant::now())`
/// is due at once whatever it is (`now_nanos_exact`). The first raw read of a process may set a
/// vDSO lookup up (rustix's took about 5 us), and the thread can be preempted between the reads
/// on a busy machine: so the raw clock is read once before, and the pair is read again until an
/// `Instant` taken after the raw reading is within the bound of the first.
fn system_origins() -> (Instant, Option<u64>) {
    // A first read, so that any set-up it does comes before a pair is timed.
    if monotonic_nanos().is_none() {
        return (Instant::now(), None);
    }
    let (origin, raw, _) = closest_origins(Instant::now, monotonic_nanos);
    (origin, raw)
}

/// Reads pairs of an `Instant` (`now`) and then a raw reading (`raw`) until an `Instant` taken
/// after the raw one is within [`ORIGINS_APART`] of the pair's, at most [`ORIGIN_TRIES`] times;
/// returns the closest pair and how far apart it was read.
fn closest_origins(
    now: impl Fn() -> Instant,
    raw: impl Fn() -> Option<u64>,
) -> (Instant, Option<u64>, Duration) {
    let mut best: Option<(Instant, Option<u64>, Duration)> = None;
    for _ in 0..ORIGIN_TRIES {
        let origin = now();
        let reading = raw();
        let apart = now().saturating_duration_since(origin);
        if best.is_none_or(|(_, _, least)| apart < least) {
            best = Some((origin, reading, apart));
        }
        if apart <= ORIGINS_APART {
            break;
        }
    }
    best.expect("ORIGIN_TRIES is at least 1")
}

/// How far apart the system clock's two origins may be read (see [`system_origins`]): the raw
/// time line lags the `Instant` one by at most this.
const ORIGINS_APART: Duration = Duration::from_micros(1);

/// Tries at reading the two origins within [`ORIGINS_APART`] before taking the closest pair.
const ORIGIN_TRIES: u32 = 16;

/// `d` in whole nanoseconds, saturating at `u64::MAX`.
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `base + nanos`, saturating where `Instant` cannot go further.
fn add_nanos(base: Instant, nanos: u64) -> Instant {
    let d = Duration::from_nanos(nanos);
    base.checked_add(d).unwrap_or_else(|| far_future(base))
}

/// The latest instant we can form from `base` (about a century on; `Instant` has no MAX).
#[cold]
fn far_future(base: Instant) -> Instant {
    let mut step = Duration::from_secs(1 << 62);
    let mut at = base;
    while step > Duration::ZERO {
        if let Some(next) = at.checked_add(step) {
            at = next;
        }
        step /= 2;
    }
    at
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        let t = TimeBase::new(Clock::System, Duration::from_millis(1));
        assert_eq!(t.tick_ceil(0), 0);
        assert_eq!(t.tick_ceil(1), 1);
        assert_eq!(t.tick_ceil(1_000_000), 1);
        assert_eq!(t.tick_ceil(1_000_001), 2);
        assert_eq!(t.tick_floor(1_999_999), 1);
        assert_eq!(t.tick_ceil(u64::MAX), u64::MAX.div_ceil(1_000_000));
        assert_eq!(t.nanos_of_tick(u64::MAX), u64::MAX);
    }

    #[test]
    fn conversions_saturate() {
        assert_eq!(duration_nanos(Duration::MAX), u64::MAX);
        let t = TimeBase::new(Clock::System, Duration::from_micros(1));
        let far = t.instant_of(u64::MAX);
        assert!(far > Instant::now());
        let before_origin = Instant::now().checked_sub(Duration::from_secs(1));
        if let Some(b) = before_origin {
            assert_eq!(t.nanos_of(b), 0, "an instant before the origin clamps to 0");
        }
    }

    /// Spins until `done()` (never long: the targets below are at most 100 us away).
    fn spin_until(done: impl Fn() -> bool) {
        while !done() {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_sleep_until_a_wake_instant_never_ends_before_its_time() {
        let t = TimeBase::new(Clock::System, Duration::from_micros(1));
        for round in 0..3_000u64 {
            let target = t.now_nanos() + [0, 1, 50, 1_000, 100_000][(round % 5) as usize];
            let at = t.wake_instant(target);
            spin_until(|| Instant::now() >= at);
            let now = t.now_nanos();
            assert!(
                now >= target,
                "woke at {now}, before {target} (round {round})"
            );
        }
        // Long past, and far in the future.
        assert!(t.wake_instant(0) <= Instant::now());
        assert!(t.wake_instant(u64::MAX) > Instant::now() + Duration::from_secs(1 << 30));
    }

    #[test]
    fn a_callers_instant_comes_due_no_earlier_than_itself_and_reports_as_itself() {
        let t = TimeBase::new(Clock::System, Duration::from_micros(1));
        for round in 0..3_000u32 {
            let at = Instant::now() + Duration::from_nanos(u64::from(round % 7) * 10_000);
            let deadline = t.nanos_of(at);
            assert_eq!(t.instant_of(deadline), at, "reported as given");
            spin_until(|| t.now_nanos() >= deadline);
            assert!(
                Instant::now() >= at,
                "due before the caller's instant (round {round})"
            );
        }
    }

    #[test]
    fn the_pools_now_never_runs_ahead_of_instant_and_stays_close_to_it() {
        let t = TimeBase::new(Clock::System, Duration::from_micros(1));
        let mut closest = u64::MAX;
        for _ in 0..1_000 {
            let ours = t.now_nanos();
            let theirs = t.nanos_of(Instant::now());
            assert!(ours <= theirs, "{ours} ns read before {theirs} ns");
            closest = closest.min(theirs - ours);
        }
        // Only a bug (a wrong unit, another clock) keeps every pair of readings apart: the
        // closest of a thousand is a few tens of nanoseconds, even on a busy machine.
        assert!(closest < 1_000_000, "never within 1 ms: {closest} ns");
    }

    /// Spins for `d` (a held-up read: the vDSO's set-up, or a preemption).
    fn stall(d: Duration) {
        let start = Instant::now();
        spin_until(|| start.elapsed() >= d);
    }

    #[test]
    fn the_origins_are_read_again_when_a_read_was_held_up() {
        // The first raw read takes 20 us (a vDSO lookup's set-up, as rustix's took 5 us):
        // that pair is not kept.
        let calls = std::cell::Cell::new(0u32);
        let (_, raw, apart) = closest_origins(Instant::now, || {
            calls.set(calls.get() + 1);
            if calls.get() == 1 {
                stall(Duration::from_micros(20));
            }
            Some(u64::from(calls.get()))
        });
        assert!(
            raw != Some(1),
            "the held-up pair was kept ({apart:?} apart)"
        );
        assert!(calls.get() >= 2);
        // Every read held up: the closest of all the tries, after all of them.
        let calls = std::cell::Cell::new(0u32);
        let (_, _, apart) = closest_origins(Instant::now, || {
            calls.set(calls.get() + 1);
            stall(Duration::from_micros(if calls.get() == 5 { 3 } else { 30 }));
            Some(0)
        });
        assert_eq!(calls.get(), ORIGIN_TRIES);
        assert!(
            apart < Duration::from_micros(30),
            "the closest pair: {apart:?}"
        );
    }

    #[test]
    fn the_pools_now_lags_instant_by_at_most_the_origins_gap_and_a_come_instant_is_due() {
        for _ in 0..50 {
            let t = TimeBase::new(Clock::System, Duration::from_micros(1));
            let mut lag = 0;
            for _ in 0..100 {
                let theirs = t.nanos_of(Instant::now());
                let ours = t.now_nanos();
                lag = lag.max(theirs.saturating_sub(ours));
                let at = Instant::now();
                assert!(
                    t.nanos_of(at) <= t.now_nanos_exact(),
                    "an instant come is due"
                );
            }
            assert!(
                lag <= duration_nanos(ORIGINS_APART),
                "the pool's now lags Instant by {lag} ns"
            );
        }
    }

    #[test]
    fn manual_clock_stands_still_until_advanced() {
        let c = ManualClock::new();
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        c.advance(Duration::from_millis(5));
        assert_eq!(c.now() - t0, Duration::from_millis(5));
        c.advance(Duration::MAX);
        assert!(c.now() > t0);
    }
}
