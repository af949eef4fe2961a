//! Where a helper woken for a worker's own work runs (Linux).
//!
//! A worker that wakes a sleeper for tasks it just pushed onto its own deque (the watcher's due
//! timers, `ReadyQueues::push_from_watcher`) goes on to run one of them itself. Linux often
//! places the woken thread on its waker's CPU, so the helper then waits behind that task while
//! another CPU idles: timers due beside a 0.5 ms task waited for it in most rounds on the 2-vCPU
//! VM (BENCHMARKS.md). So such a wake first takes the waker's CPU out of the helper's affinity;
//! the helper puts its own affinity back as soon as it runs. Pinning workers for good would
//! keep one from moving off a CPU that another process keeps busy.
//!
//! - Each worker records its thread id and its affinity when it starts (`register`).
//! - `keep_off_this_cpu(index)` (the waker, before the unpark) sets worker `index`'s affinity to
//!   its own less the CPU the caller runs on, if that leaves any, and marks it displaced.
//! - `restore(index)` (worker `index`, when its park returns) puts the recorded affinity back
//!   if it was displaced.
//! - A failed call changes nothing that matters: the helper runs where the kernel puts it, as
//!   before. A displaced worker that is also moved by its user (`taskset`) gets the mask it had
//!   when it started back; a pool's threads are its own.
//!
//! Elsewhere than Linux, and under loom and Miri, both are no-ops.

#[cfg(all(target_os = "linux", not(wheelpool_loom), not(miri)))]
mod imp {
    use parking_lot::Mutex;
    use rustix::thread::{gettid, sched_getaffinity, sched_setaffinity, CpuSet, Pid};

    /// A worker's thread and the affinity it started with.
    struct Home {
        tid: Pid,
        allowed: CpuSet,
        displaced: bool,
    }

    /// One slot per worker (see the module docs).
    pub(crate) struct Placement {
        homes: Box<[Mutex<Option<Home>>]>,
    }

    impl Placement {
        pub(crate) fn new(workers: usize) -> Self {
            Placement {
                homes: (0..workers).map(|_| Mutex::new(None)).collect(),
            }
        }

        /// The calling thread is worker `index`.
        pub(crate) fn register(&self, index: usize) {
            if let Ok(allowed) = sched_getaffinity(None) {
                *self.homes[index].lock() = Some(Home {
                    tid: gettid(),
                    allowed,
                    displaced: false,
                });
            }
        }

        /// Before waking worker `index` for work the caller keeps running beside: keep it off
        /// the caller's CPU until it runs. Returns that CPU if it did.
        pub(crate) fn keep_off_this_cpu(&self, index: usize) -> Option<usize> {
            let mut home = self.homes[index].lock();
            let home = home.as_mut()?;
            let cpu = crate::sync::os::current_cpu()?;
            let mut elsewhere = home.allowed;
            elsewhere.unset(cpu);
            if elsewhere.count() == 0 {
                return None; // the helper may only run here
            }
            sched_setaffinity(Some(home.tid), &elsewhere).ok()?;
            home.displaced = true;
            Some(cpu)
        }

        /// Worker `index` (the calling thread) woke: its own affinity back, if it was moved.
        pub(crate) fn restore(&self, index: usize) {
            let mut home = self.homes[index].lock();
            let Some(home) = home.as_mut() else { return };
            if home.displaced {
                home.displaced = false;
                let _ = sched_setaffinity(None, &home.allowed);
            }
        }
    }

    impl std::fmt::Debug for Placement {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Placement").finish_non_exhaustive()
        }
    }
}

#[cfg(not(all(target_os = "linux", not(wheelpool_loom), not(miri))))]
mod imp {
    /// Nothing to place where the kernel's placement cannot be steered (see the module docs).
    #[derive(Debug)]
    pub(crate) struct Placement;

    impl Placement {
        pub(crate) fn new(_workers: usize) -> Self {
            Placement
        }
        pub(crate) fn register(&self, _index: usize) {}
        pub(crate) fn keep_off_this_cpu(&self, _index: usize) -> Option<usize> {
            None
        }
        pub(crate) fn restore(&self, _index: usize) {}
    }
}

pub(crate) use imp::Placement;

#[cfg(all(test, target_os = "linux", not(wheelpool_loom), not(miri)))]
mod tests {
    use super::Placement;
    use rustix::thread::{gettid, sched_getaffinity};
    use std::sync::{mpsc, Arc};

    #[test]
    fn a_helper_is_kept_off_the_wakers_cpu_until_it_runs_then_gets_its_affinity_back() {
        let place = Arc::new(Placement::new(1));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let helper = {
            let place = place.clone();
            std::thread::spawn(move || {
                place.register(0);
                let before = sched_getaffinity(None).unwrap();
                ready_tx.send(gettid()).unwrap();
                go_rx.recv().unwrap(); // "parked" until the waker is done
                let moved = sched_getaffinity(None).unwrap();
                place.restore(0);
                let after = sched_getaffinity(None).unwrap();
                (before, moved, after)
            })
        };
        let tid = ready_rx.recv().unwrap();
        let allowed = sched_getaffinity(Some(tid)).unwrap();
        let kept_off = place.keep_off_this_cpu(0);
        go_tx.send(()).unwrap();
        let (before, moved, after) = helper.join().unwrap();
        match kept_off {
            Some(cpu) => {
                assert!(!moved.is_set(cpu), "still allowed on the waker's CPU {cpu}");
                assert_eq!(moved.count() + 1, before.count());
            }
            // Only one CPU allowed: nothing to move it to.
            None => assert_eq!(allowed.count(), 1),
        }
        assert_eq!(after.count(), before.count(), "its own affinity back");
        for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
            assert_eq!(after.is_set(cpu), before.is_set(cpu));
        }
        // Nothing moved, nothing to restore; an unregistered worker is left alone.
        place.restore(0);
        assert_eq!(Placement::new(1).keep_off_this_cpu(0), None);
    }
}
