//! How idle workers sleep and how a push wakes one of them.
//!
//! # Ground rules
//!
//! - A worker with nothing to do announces itself: under `sleepers`' lock it pushes its index
//!   and bumps `num_sleeping` (SeqCst). Then `fence(SeqCst)`, then it looks for work once more;
//!   if it finds any (or the pool is ending) it withdraws instead of parking.
//! - A pusher makes its task visible in a queue, then `fence(SeqCst)`, then reads
//!   `num_sleeping`. If it is non-zero it pops up to `n` sleepers under the lock and unparks each.
//! - The two fences make a Dekker pair: either the sleeper's last look sees the task, or the
//!   pusher sees the sleeper. So a task is never left queued while every worker sleeps (no lost
//!   wake-up).
//! - A push wakes at most as many sleepers as it pushed tasks (a single push wakes one, never
//!   all: no thundering herd). A worker that takes a task from the shared injector and sees more
//!   behind it wakes one more sleeper, so a backlog spreads without a broadcast.
//! - Every change to `sleepers` and `num_sleeping` happens under `sleepers`' lock, so the count
//!   never disagrees with the list for longer than a critical section.
//! - A worker that has run out of work *searches* (spins over the queues) for a short while
//!   before it sleeps, and says so in `searching`. A push of `n` tasks wakes at most
//!   `n - searching` sleepers: each searcher will find one of the tasks, which saves a futex wake
//!   per push under a steady stream (a single push seen by a searcher wakes nobody).
//!   This cannot lose a task: the searcher's last look happens after `fence(SeqCst)` in `sleep`,
//!   which follows its decrement of `searching`; a pusher that still read it as searching did
//!   so before that decrement, so its push is visible to that last look (fence-fence rule).
//!   A searcher that finds work and was the last one searching wakes one sleeper, so work that
//!   arrived while it searched does not wait for it to finish its task.
//! - Each worker's `Parker` keeps one token: an unpark that lands between the announcement and the
//!   park is not lost; a stale token costs one extra look for work.
//! - At most one sleeper at a time is the timer's *watcher* (`watcher`, taken by CAS): it parks
//!   until the tick the timer thread sleeps until (see "The watcher" in `timer/mod.rs`). It
//!   registers before the timer's fence in `Timer::watch_tick`, so a driver that does not see the
//!   registration has its tick read by the watcher. A nudge (`nudge`) unparks the watcher without
//!   taking it off `sleepers`; a pusher's wake takes it off. So on waking the watcher tells them
//!   apart under `sleepers`' lock: still listed and not at its deadline means a nudge (or a stale
//!   token), and it reads the tick again and parks; taken off means work. Either way the lost
//!   wake-up argument above is unchanged: the watcher stays announced while it re-parks.

use super::place::Placement;
use crate::sync::{fence, AtomicUsize, CachePadded, Mutex, Ordering, Parker};
use std::time::Instant;

/// `watcher` when no worker watches.
const NONE: usize = usize::MAX;

/// What the watcher asks of the timer (implemented over the pool's core).
pub(crate) trait Watch {
    /// Registers the watch and returns the instant to park until (`None`: until nudged).
    fn until(&self) -> Option<Instant>;
    /// The watch is over.
    fn unwatch(&self);
}

/// Why a sleeping worker woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// Work may be waiting (or the pool is ending): look for it.
    Work,
    /// The watcher's tick came: poll the timer's due shards first.
    Due,
}

/// The sleep side of the pool.
#[derive(Debug)]
pub(crate) struct Sleep {
    /// Indices of announced sleepers, most recent last (woken LIFO: warm caches first).
    sleepers: Mutex<Vec<usize>>,
    /// `sleepers.len()`, readable without the lock.
    num_sleeping: CachePadded<AtomicUsize>,
    /// Workers spinning over the queues before they sleep.
    searching: CachePadded<AtomicUsize>,
    /// The sleeper that watches the timer's next tick (`NONE`: nobody).
    watcher: CachePadded<AtomicUsize>,
    /// One per worker, each on its own cache line: a worker parks on its own and pushers
    /// unpark others', so unpadded neighbours in this slice shared lines between threads.
    parkers: Box<[CachePadded<Parker>]>,
    /// Keeps a helper woken for a worker's own work off that worker's CPU (`place.rs`).
    place: Placement,
}

impl Sleep {
    pub(crate) fn new(workers: usize) -> Self {
        Sleep {
            sleepers: Mutex::new(Vec::with_capacity(workers)),
            num_sleeping: CachePadded::new(AtomicUsize::new(0)),
            searching: CachePadded::new(AtomicUsize::new(0)),
            watcher: CachePadded::new(AtomicUsize::new(NONE)),
            parkers: (0..workers)
                .map(|_| CachePadded::new(Parker::new()))
                .collect(),
            place: Placement::new(workers),
        }
    }

    /// Puts worker `index` to sleep unless `has_work()` says otherwise after the announcement.
    /// With `watch` (a running pool on a real clock) the worker may become the watcher: then
    /// `watch()` registers it with the timer and gives the instant to park until, and
    /// `Woke::Due` says that instant came (ground rules).
    pub(crate) fn sleep(
        &self,
        index: usize,
        has_work: impl Fn() -> bool,
        watch: Option<&dyn Watch>,
    ) -> Woke {
        {
            let mut sleepers = self.sleepers.lock();
            sleepers.push(index);
            self.num_sleeping.fetch_add(1, Ordering::SeqCst);
        }
        // SeqCst fence: pairs with the fence in `notify` (ground rules above).
        fence(Ordering::SeqCst);
        let mut woke = Woke::Work;
        if !has_work() {
            match watch.filter(|_| self.become_watcher(index)) {
                Some(watch) => {
                    woke = self.watch(index, &has_work, watch);
                    watch.unwatch();
                    // Release: the next watcher's CAS follows our last look.
                    self.watcher.store(NONE, Ordering::Release);
                }
                None => self.parkers[index].park(None),
            }
        }
        // A waker may have moved us (even one that found us announced but not yet parked).
        self.place.restore(index);
        self.withdraw(index);
        woke
    }

    /// True if worker `index` became the watcher.
    pub(crate) fn become_watcher(&self, index: usize) -> bool {
        // SeqCst: the registration precedes the timer's fence in `Timer::watch_tick` (ground
        // rules); Acquire would do for the hand-over between watchers alone.
        self.watcher
            .compare_exchange(NONE, index, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// The watcher parks until its tick, again after each nudge.
    fn watch(&self, index: usize, has_work: &impl Fn() -> bool, watch: &dyn Watch) -> Woke {
        loop {
            let deadline = watch.until();
            self.parkers[index].park(deadline);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Woke::Due;
            }
            let listed = self.sleepers.lock().contains(&index);
            if !listed || has_work() {
                return Woke::Work; // a pusher's wake (or shutdown's), not a nudge
            }
        }
    }

    /// The timer thread will sleep until an earlier tick than the watcher watches: make it read
    /// the tick again. False if nobody watches.
    pub(crate) fn nudge(&self) -> bool {
        // Relaxed: ordered after the timer's fence by the driver (ground rules).
        let watcher = self.watcher.load(Ordering::Relaxed);
        if watcher == NONE {
            return false;
        }
        self.parkers[watcher].unpark();
        true
    }

    /// Removes `index` from the sleepers if a waker has not already done so.
    fn withdraw(&self, index: usize) {
        let mut sleepers = self.sleepers.lock();
        if let Some(pos) = sleepers.iter().rposition(|&i| i == index) {
            sleepers.swap_remove(pos);
            self.num_sleeping.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The calling worker starts searching for work before it sleeps.
    pub(crate) fn start_searching(&self) {
        self.searching.fetch_add(1, Ordering::SeqCst);
    }

    /// The calling worker stops searching; true if it was the last searcher.
    pub(crate) fn stop_searching(&self) -> bool {
        // SeqCst: this decrement precedes the fence in `sleep` (ground rules).
        self.searching.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// `n` tasks were just pushed: wake up to `n` sleepers, less one per worker already
    /// searching. Returns how many it woke.
    pub(crate) fn notify(&self, n: usize) -> usize {
        self.notify_placed(n, false)
    }

    /// The calling worker is worker `index`: records where it may run (`place.rs`).
    pub(crate) fn register(&self, index: usize) {
        self.place.register(index);
    }

    /// As [`notify`](Self::notify), from a worker that pushed the tasks onto its own deque and
    /// runs one of them next: the sleepers it wakes are kept off its CPU until they run
    /// (`place.rs`), so they do not wait behind that task.
    pub(crate) fn notify_away(&self, n: usize) -> usize {
        self.notify_placed(n, true)
    }

    /// [`notify`](Self::notify), with the sleepers it wakes kept off this CPU if `away`.
    #[inline(always)]
    fn notify_placed(&self, n: usize, away: bool) -> usize {
        // SeqCst fence: pairs with the fence in `sleep`; the pushed tasks are visible before we
        // read `searching` and `num_sleeping`.
        fence(Ordering::SeqCst);
        let n = n.saturating_sub(self.searching.load(Ordering::Relaxed));
        if n == 0 || self.num_sleeping.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.wake(n, away)
    }

    #[cold]
    fn wake(&self, n: usize, away: bool) -> usize {
        let mut woken = [0usize; 8];
        let mut count = 0;
        {
            let mut sleepers = self.sleepers.lock();
            while count < n.min(woken.len()) {
                let Some(index) = sleepers.pop() else { break };
                self.num_sleeping.fetch_sub(1, Ordering::SeqCst);
                woken[count] = index;
                count += 1;
            }
        }
        // Unpark outside the lock.
        for &index in &woken[..count] {
            if away {
                self.place.keep_off_this_cpu(index);
            }
            self.parkers[index].unpark();
        }
        if n > woken.len() && count == woken.len() {
            return count + self.wake(n - count, away);
        }
        count
    }

    /// Wakes every worker (shutdown): sleepers and anyone about to sleep.
    pub(crate) fn wake_all(&self) {
        {
            let mut sleepers = self.sleepers.lock();
            sleepers.clear();
            self.num_sleeping.store(0, Ordering::SeqCst);
        }
        for p in self.parkers.iter() {
            p.unpark();
        }
    }
}
