//! A shard: one wheel and its gate under one lock, the hint the timer thread reads without the
//! lock, and the helpers every change to a wheel goes through (ground rules in `timer/mod.rs`).

use crate::sync::{lock_urgent, AtomicU64, Ordering, SpinMutex, SpinMutexGuard};
use crate::task::{RawTask, TaskRef, NO_KEY, ORPHANED};
use crate::wheel::{Key, Storage, Wheel};

/// Entries the driver moves (hands out or cascades) per shard in one locked step. 512 moves
/// are some tens of microseconds: the longest a producer waits for a shard's lock, and the most
/// work between a due timer in another shard and its turn.
pub(crate) const CHUNK: usize = 512;

/// How a poll stages coarse slots ahead (see "Staging" in `timer/mod.rs`): from which wheel
/// level up, and how far ahead. The timer picks it per poll from its slack
/// ([`Timer::staging`](super::Timer::staging)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Staging {
    /// The lowest level whose slots are staged: [`PRECISE_FROM`] or [`BATCHING_FROM`].
    pub(crate) from: usize,
    /// How far ahead of its first tick a slot is staged, in ticks.
    pub(crate) horizon: u64,
}

/// The lowest staged level while the timer side is precise (little or no slack). A slot of
/// level 2 spans 4 ms at the 1 us tick: W3's 100 000 timers over a second put 400 in one,
/// whose cascade when the slot came took 20-100 us (cold entries), holding its first timers
/// up; it was W3's p99 (80 us against 45 so).
pub(crate) const PRECISE_FROM: usize = 2;

/// The lowest staged level while the timer side batches (its slack near the cap). A slot of
/// level 2 then holds the timers of a dense stream (W5's million runs a second put 4 000 in
/// one), and its cascade when it comes, in `CHUNK` steps, hides in the slack the driver
/// already sleeps past each deadline; staging it cost W5 5-9% more CPU. A slot of level 3
/// spans 262 ms and collects enough to hold its first timers up past any slack (W3: 26 000
/// entries, 0.3-0.8 ms), so it is always staged.
pub(crate) const BATCHING_FROM: usize = 3;

/// Entries a poll that found due entries may still stage: a few microseconds, which those
/// entries wait for before they are handed out.
const STAGE_WITH_DUE: usize = 16;

/// Entries a poll that found nothing due stages at most. Smaller than `CHUNK`: the driver goes
/// round again at once while there is more (`Polled::stage`), releasing the lock in between,
/// so a timer that comes due meanwhile waits for one step (a few microseconds), not 512
/// moves (20-100 us with cold entries).
const STAGE_STEP: usize = 64;

/// Which waiting tasks a graceful shutdown keeps in the wheels, to run at their time (the pool's
/// policy, from its builder). The driver's sweep takes the others out: periodic tasks go to the
/// workers to be stopped, one-shots not yet due are handed back to the pool
/// ([`Host::hand_back_at_shutdown`](super::Host::hand_back_at_shutdown)). The shards' `Closing` gate admits only kept tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keep {
    /// One-shots still waiting for their time run then (Java's default), or are handed back.
    pub(crate) one_shots: bool,
    /// Periodic tasks go on until cancelled or `shutdown_now`, or stop (the default).
    pub(crate) periodic: bool,
}

impl Keep {
    /// Java's defaults: waiting one-shots run, periodic tasks stop.
    pub(crate) const DEFAULT: Keep = Keep {
        one_shots: true,
        periodic: false,
    };

    /// True if `task` stays in (or may go into) a wheel during a graceful shutdown.
    pub(crate) fn keeps(self, task: &dyn RawTask) -> bool {
        if task.header().is_periodic() {
            self.periodic
        } else {
            self.one_shots
        }
    }
}

/// Why [`Timer::insert`](super::Timer::insert) gave a task back instead of keeping it in a
/// wheel. The caller owns the task again.
#[derive(Debug)]
pub(crate) enum NotInserted {
    /// A re-arm whose deadline had already passed: the caller hands it straight to the workers.
    Due(TaskRef),
    /// The pool is shutting down and the shard's gate is closed to this task: the caller stops
    /// it.
    Refused(TaskRef),
}

/// Who may insert into a shard (see the ground rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    Open,
    Closing(Keep),
    Stopped,
}

impl Gate {
    /// True if `task` may go into (or move within) a shard behind this gate.
    pub(super) fn admits(self, task: &dyn RawTask) -> bool {
        match self {
            Gate::Open => true,
            Gate::Closing(keep) => keep.keeps(task),
            Gate::Stopped => false,
        }
    }
}

/// One wheel and its gate, under one lock.
#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) wheel: Wheel<TaskRef>,
    pub(super) gate: Gate,
}

/// A shard's lock, and what the timer thread may read of it without the lock.
#[derive(Debug)]
pub(crate) struct ShardCell {
    pub(super) lock: SpinMutex<Shard>,
    /// A lower bound on the earliest tick in the wheel (`u64::MAX`: none). Written only under
    /// `lock`: lowered by an insert below it, set to the wheel's next expiration by a poll.
    /// A cancel leaves it alone (it stays a lower bound).
    pub(super) hint: AtomicU64,
}

impl ShardCell {
    pub(crate) fn lock(&self) -> SpinMutexGuard<'_, Shard> {
        self.lock.lock()
    }

    /// The timer thread's lock: it waits for the current holder, not for producers that come
    /// after it (`sync/spin.rs`), so a shard that producers keep busy holds no due timer up.
    pub(crate) fn lock_urgent(&self) -> SpinMutexGuard<'_, Shard> {
        lock_urgent(&self.lock)
    }

    /// The hint, read without the lock (see the ground rules).
    pub(crate) fn hint(&self) -> Option<u64> {
        // Relaxed: a stale value is caught by the fence pair of the sleep protocol.
        let hint = self.hint.load(Ordering::Relaxed);
        (hint != u64::MAX).then_some(hint)
    }

    /// Under the lock, after a poll: the wheel's next expiration.
    pub(crate) fn set_hint(&self, _locked: &Shard, next: Option<u64>) {
        self.hint.store(next.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// One bounded poll of this shard, the driver's or the watcher's, under its lock: moves at
    /// most `CHUNK` entries due by tick `now` onto `due` (their keys cleared), stages coarse
    /// slots ahead as `staging` says, a short step ([`STAGE_WITH_DUE`] entries if it found any
    /// due, else [`STAGE_STEP`]; see "Staging"), and sets the hint to the wheel's next
    /// expiration. Returns whether the shard has more due, whether it may have more to stage,
    /// and that next expiration.
    pub(crate) fn poll_chunk(
        &self,
        shard: &mut Shard,
        now: u64,
        staging: Staging,
        due: &mut Vec<TaskRef>,
    ) -> Polled {
        let from = due.len();
        let more = !shard.wheel.poll_expired_bounded(now, CHUNK, due);
        clear_keys(&due[from..]);
        let mut stage = false;
        if !more {
            let budget = if due.len() > from {
                STAGE_WITH_DUE
            } else {
                STAGE_STEP
            };
            stage = shard
                .wheel
                .stage_ahead_from(staging.from, budget, staging.horizon)
                == budget;
        }
        // Firing empties a shard as a cancel does.
        let spare = give_back_if_empty(&mut shard.wheel);
        let next = shard.wheel.next_expiration();
        self.set_hint(shard, next);
        Polled {
            more,
            stage,
            next,
            spare,
        }
    }

    /// Under the lock, after an insert at `tick`: lowers the hint; true if it did.
    pub(super) fn lower_hint(&self, _locked: &Shard, tick: u64) -> bool {
        let lowered = tick < self.hint.load(Ordering::Relaxed);
        if lowered {
            self.hint.store(tick, Ordering::Relaxed);
        }
        lowered
    }
}

/// What one [`ShardCell::poll_chunk`] left.
#[derive(Debug)]
pub(crate) struct Polled {
    /// The shard has more due now.
    pub(crate) more: bool,
    /// The shard may have more to stage (its budget ran out).
    pub(crate) stage: bool,
    /// The wheel's next expiration.
    pub(crate) next: Option<u64>,
    /// The storage an emptied shard gave up, for the caller to free after unlocking and after
    /// what the poll found ([`Spare`]).
    pub(crate) spare: Option<Storage<TaskRef>>,
}

/// Storage that emptied shards gave up, kept until the timer thread frees it as it parks: after
/// the timers the poll that emptied the shard found, never in their way. Freeing a slab is an
/// `munmap` once it is large (4 MB for 100 000 entries), which took about a millisecond here:
/// freed right after the watcher's poll that emptied the shard, it made the last timer of W3
/// 1 ms late (10 000 timers: 0.2 ms).
#[derive(Debug, Default)]
pub(crate) struct Spare(Vec<Storage<TaskRef>>);

impl Spare {
    /// Keeps what a poll gave up.
    pub(crate) fn keep(&mut self, storage: Option<Storage<TaskRef>>) {
        self.0.extend(storage);
    }

    /// Keeps everything `other` kept, leaving it empty.
    pub(crate) fn take_from(&mut self, other: &mut Spare) {
        self.0.append(&mut other.0);
    }

    /// Frees everything kept so far.
    pub(crate) fn free(&mut self) {
        self.0.clear();
    }

    /// Whether nothing is kept.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An empty shard keeps this many entries' room of its wheel for reuse (whole chunks of its
/// storage: 4032 entries, 126 KB), so one timer armed and cancelled (or fired) at a time costs
/// no allocation, and emptiness gives back only the room past it.
///
/// Keeping those chunks also keeps glibc's most common merge out of the cancel that empties a
/// large shard: they sit in its heap, and freeing one of 64 KB or more there makes glibc merge
/// every small block freed so far (after a million cancels, a million task cells: W1's cancels
/// took 20-40 ns more each). The larger chunks are mappings of their own the first time a shard
/// grows (glibc maps blocks of 128 KB and up) and go back with an `munmap` each; once glibc has
/// freed a mapping it raises that threshold to the mapping's size, and later chunks below it
/// come from the heap, whose free may merge again. That is the allocator's own policy, paid by
/// the thread that frees, after unlocking.
pub(super) const RELEASE_AT: usize = 4096;

/// The give-back rule, applied wherever entries leave a wheel (a cancel's unlink, a poll that
/// fires them): a shard left empty gives back its room past [`RELEASE_AT`] entries. O(1) under
/// the lock (an empty wheel forgets its nodes without visiting them); the caller frees what this
/// returns after unlocking, since freeing tens of megabytes (an munmap) under a lock that never
/// parks would keep its waiters spinning and napping.
///
/// A shard that is not empty keeps its room, as a `Vec` keeps its capacity: its peak number of
/// entries times the entry size (32 B), rounded up to a whole chunk (at most twice the peak plus
/// 62 entries), until it empties. Giving that back earlier would mean compacting live entries under
/// the lock, which is unbounded work.
#[must_use = "free the storage after unlocking"]
pub(super) fn give_back_if_empty(wheel: &mut Wheel<TaskRef>) -> Option<Storage<TaskRef>> {
    // Asked at every cancel: the common answer (entries remain) is one comparison here, and
    // the call only for an emptied shard.
    if wheel.is_empty() {
        wheel.take_storage_if_empty(RELEASE_AT)
    } else {
        None
    }
}

/// Tasks that just left a wheel (under its lock): clear their keys, so no later unlink looks
/// for them there (the slot may hold another task by then; the identity check would refuse it
/// anyway).
pub(crate) fn clear_keys(tasks: &[TaskRef]) {
    for task in tasks {
        task.header().set_wheel_key(NO_KEY);
    }
}

/// Removes the wheel entry of `task`, if it has a live one; returns the wheel's reference so
/// the caller drops it after unlocking (or orphans it, under the lock). Called under the
/// shard's lock.
#[inline]
pub(super) fn unlink(wheel: &mut Wheel<TaskRef>, task: &dyn RawTask) -> Option<TaskRef> {
    let header = task.header();
    let key = header.wheel_key();
    if key == NO_KEY || key == ORPHANED {
        return None; // not inserted yet, already handed out, or already unlinked by a cancel
    }
    header.set_wheel_key(NO_KEY);
    // The key is cleared whenever the task leaves the wheel, so it names this task's entry;
    // the identity check keeps a broken rule from ever unlinking another task.
    wheel.remove(Key::from_u32(key), |entry| {
        std::ptr::addr_eq(entry.as_ptr(), task as *const dyn RawTask)
    })
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use crate::task::{single, OneShot, TaskCell, TaskPtr};

    fn task() -> TaskRef {
        single(TaskCell::new(OneShot::new(|| ()), 0, 0))
    }

    fn insert(wheel: &mut Wheel<TaskRef>, task: &TaskRef, tick: u64) {
        let key = wheel.insert(tick, task.clone());
        task.header().set_wheel_key(key.to_u32());
    }

    fn cell_with(wheel: Wheel<TaskRef>) -> ShardCell {
        ShardCell {
            lock: SpinMutex::new(Shard {
                wheel,
                gate: Gate::Open,
            }),
            hint: AtomicU64::new(u64::MAX),
        }
    }

    /// Polls at `now` until nothing is left to stage; returns how many polls found entries
    /// due, and how many polls it took.
    fn polls_to_stage(cell: &ShardCell, now: u64, staging: Staging) -> (usize, usize) {
        let (mut with_due, mut polls) = (0, 0);
        loop {
            let mut due = Vec::new();
            let polled = cell.poll_chunk(&mut cell.lock(), now, staging, &mut due);
            polls += 1;
            with_due += usize::from(!due.is_empty());
            if !polled.stage {
                return (with_due, polls);
            }
        }
    }

    #[test]
    fn a_poll_stages_a_short_step_and_a_shorter_one_when_it_found_due_entries() {
        // 100 entries in one slot of level 2 (ticks 4096..8191) and one due at tick 10.
        let mut wheel = Wheel::new();
        let tasks: Vec<TaskRef> = (0..101).map(|_| task()).collect();
        insert(&mut wheel, &tasks[0], 10);
        for (i, t) in tasks[1..].iter().enumerate() {
            insert(&mut wheel, t, 4_096 + 37 * i as u64);
        }
        let cell = cell_with(wheel);
        let staging = Staging {
            from: PRECISE_FROM,
            horizon: u64::MAX,
        };
        // First poll: hands out the due entry, stages 16; then 64, then the last 20 (a step
        // that moves fewer than its budget says there is nothing more).
        assert_eq!(polls_to_stage(&cell, 10, staging), (1, 3));
        assert_eq!(cell.lock().wheel.len(), 100);
        // Staged, the slot comes live in O(1): its first entry is due at its first tick.
        let mut due = Vec::new();
        cell.poll_chunk(&mut cell.lock(), 4_096, staging, &mut due);
        assert_eq!(due.len(), 1);
        assert!(TaskPtr::ptr_eq(&due[0], &tasks[1]));
    }

    #[test]
    fn a_batching_poll_leaves_level_two_to_cascade_when_its_slot_comes() {
        let mut wheel = Wheel::new();
        let tasks: Vec<TaskRef> = (0..100).map(|_| task()).collect();
        for (i, t) in tasks.iter().enumerate() {
            insert(&mut wheel, t, 4_096 + 37 * i as u64);
        }
        let cell = cell_with(wheel);
        let staging = Staging {
            from: BATCHING_FROM,
            horizon: u64::MAX,
        };
        assert_eq!(
            polls_to_stage(&cell, 10, staging),
            (0, 1),
            "nothing to stage"
        );
        let mut due = Vec::new();
        cell.poll_chunk(&mut cell.lock(), 4_096, staging, &mut due);
        assert_eq!(due.len(), 1);
        assert_eq!(cell.lock().wheel.len(), 99);
    }

    #[test]
    fn an_unlink_finds_its_own_entry_and_never_another_tasks() {
        let mut wheel = Wheel::new();
        let (a, b) = (task(), task());
        insert(&mut wheel, &a, 10);
        let a_key = a.header().wheel_key();
        // A fires: the driver clears its key. B then takes A's node.
        let mut due = Vec::new();
        wheel.poll_expired(10, &mut due);
        clear_keys(&due);
        insert(&mut wheel, &b, 20);
        assert_eq!(b.header().wheel_key(), a_key, "the node is reused");
        assert!(
            unlink(&mut wheel, &*a).is_none(),
            "a cleared key names nothing"
        );
        // Even with its old key put back (a broken rule), A cannot unlink B.
        a.header().set_wheel_key(a_key);
        assert!(unlink(&mut wheel, &*a).is_none());
        assert_eq!(wheel.len(), 1);
        let removed = unlink(&mut wheel, &*b).expect("B's own entry");
        assert!(TaskPtr::ptr_eq(&removed, &b));
        assert_eq!(b.header().wheel_key(), NO_KEY);
        assert!(wheel.is_empty());
    }
}
