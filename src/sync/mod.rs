//! The loom shim: every synchronisation primitive the crate uses comes from here.
//!
//! Normally these are `std` atomics, `parking_lot` locks and `crossbeam-deque` queues. Under the
//! crate's own `--cfg wheelpool_loom` they become loom's types, so the loom models explore the
//! real crate code. (Never a bare `cfg(loom)`: that would switch a downstream crate's copy of
//! us to loom's types in its own loom tests.) crossbeam-deque and parking_lot are not
//! loom-aware, so under loom the queues are a `Mutex<VecDeque>` behind the same small interface
//! and the locks are loom's. Thread-locals come from here too ([`thread_local!`]), so no
//! production file writes one twice under two cfgs.
//!
//! Crate code takes its atomics, locks, queues and thread-locals only from here, never from
//! `std::sync`, `parking_lot` or `crossbeam_deque` directly. The few std types that are no part
//! of any modelled protocol (`Arc`, `Weak`, `OnceLock`, and the [`plain`] atomics of counters
//! and ids) are re-exported below with the reason.

mod guarded;
pub(crate) mod os;
mod spin;

pub(crate) use guarded::Guarded;
#[cfg(not(wheelpool_loom))]
pub(crate) use spin::backoff_until;
pub(crate) use spin::lock_urgent;

#[cfg(not(wheelpool_loom))]
mod imp {
    pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard};
    // The locks that every schedule and cancel takes: no locked instruction to unlock.
    pub(crate) use super::spin::{SpinMutex, SpinMutexGuard};
    pub(crate) use std::sync::atomic::{
        fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
    };
    pub(crate) use std::thread;

    pub(crate) use crossbeam_deque::{Injector, Steal, Stealer, Worker};

    /// Waits on `cv` until woken or `deadline` passes; `None` waits without a time limit.
    pub(crate) fn wait_until<'a, T>(
        cv: &Condvar,
        mut guard: MutexGuard<'a, T>,
        deadline: Option<std::time::Instant>,
    ) -> MutexGuard<'a, T> {
        match deadline {
            Some(d) => {
                cv.wait_until(&mut guard, d);
            }
            None => cv.wait(&mut guard),
        }
        guard
    }
}

#[cfg(wheelpool_loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{
        fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
    };
    pub(crate) use loom::sync::Condvar as LoomCondvar;
    pub(crate) use loom::thread;
    use std::collections::VecDeque;
    use std::sync::Arc;

    /// A parking_lot-shaped mutex over loom's (lock never fails, guard derefs to `T`).
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);
    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
    /// The shard locks are spin locks outside loom (`spin.rs`); here, loom's mutex.
    pub(crate) type SpinMutex<T> = Mutex<T>;
    pub(crate) type SpinMutexGuard<'a, T> = MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }
        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }

    /// A parking_lot-shaped condvar over loom's. Timed waits never time out under loom.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(LoomCondvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(LoomCondvar::new())
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }

    /// Loom cannot time out: a timed wait is an untimed one, so models must wake the waiter.
    pub(crate) fn wait_until<'a, T>(
        cv: &Condvar,
        guard: MutexGuard<'a, T>,
        _deadline: Option<std::time::Instant>,
    ) -> MutexGuard<'a, T> {
        cv.0.wait(guard).unwrap()
    }

    /// The queue behind the loom `Injector`, `Worker` and `Stealer`: a locked deque plus its
    /// length, which `is_empty` reads without the lock, the way crossbeam's lock-free `is_empty`
    /// reads its head and tail indices. A lock-based `is_empty` would synchronise with every push
    /// through the lock and hide a missing fence in a sleep protocol; this one gives a model only
    /// the ordering crossbeam gives (SeqCst index updates and loads; loom treats them as AcqRel).
    #[derive(Debug)]
    struct LockedQueue<T> {
        items: Mutex<VecDeque<T>>,
        len: AtomicUsize,
    }

    impl<T> LockedQueue<T> {
        fn new() -> Self {
            LockedQueue {
                items: Mutex::new(VecDeque::new()),
                len: AtomicUsize::new(0),
            }
        }
        fn push_back(&self, t: T) {
            let mut items = self.items.lock();
            items.push_back(t);
            // SeqCst: crossbeam's push publishes with a SeqCst CAS of the tail; pairs with the
            // load in `is_empty`.
            self.len.fetch_add(1, Ordering::SeqCst);
        }
        fn pop(&self, back: bool) -> Option<T> {
            let mut items = self.items.lock();
            let t = if back {
                items.pop_back()
            } else {
                items.pop_front()
            };
            if t.is_some() {
                // SeqCst: as the head update of a crossbeam steal.
                self.len.fetch_sub(1, Ordering::SeqCst);
            }
            t
        }
        fn steal(&self) -> Steal<T> {
            match self.pop(false) {
                Some(t) => Steal::Success(t),
                None => Steal::Empty,
            }
        }
        fn is_empty(&self) -> bool {
            self.len() == 0
        }
        fn len(&self) -> usize {
            // SeqCst: pairs with the updates in `push_back` and `pop` (no lock taken).
            self.len.load(Ordering::SeqCst)
        }
    }

    /// The injector under loom: a locked FIFO (see `LockedQueue`).
    #[derive(Debug)]
    pub(crate) struct Injector<T>(LockedQueue<T>);

    /// The result of a steal attempt (crossbeam's shape).
    #[derive(Debug)]
    pub(crate) enum Steal<T> {
        Empty,
        Success(T),
        #[allow(dead_code)]
        Retry,
    }

    impl<T> Injector<T> {
        pub(crate) fn new() -> Self {
            Injector(LockedQueue::new())
        }
        pub(crate) fn push(&self, t: T) {
            self.0.push_back(t);
        }
        pub(crate) fn steal(&self) -> Steal<T> {
            self.0.steal()
        }
        pub(crate) fn steal_batch_and_pop(&self, _dest: &Worker<T>) -> Steal<T> {
            self.steal()
        }
        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
        pub(crate) fn len(&self) -> usize {
            self.0.len()
        }
    }

    /// A worker's local deque under loom (LIFO pop, FIFO steal like crossbeam's `new_lifo`).
    #[derive(Debug)]
    pub(crate) struct Worker<T>(Arc<LockedQueue<T>>);

    /// The stealing side of a [`Worker`].
    #[derive(Debug)]
    pub(crate) struct Stealer<T>(Arc<LockedQueue<T>>);

    impl<T> Clone for Stealer<T> {
        fn clone(&self) -> Self {
            Stealer(self.0.clone())
        }
    }

    impl<T> Worker<T> {
        pub(crate) fn new_lifo() -> Self {
            Worker(Arc::new(LockedQueue::new()))
        }
        pub(crate) fn stealer(&self) -> Stealer<T> {
            Stealer(self.0.clone())
        }
        pub(crate) fn push(&self, t: T) {
            self.0.push_back(t);
        }
        pub(crate) fn pop(&self) -> Option<T> {
            self.0.pop(true)
        }
        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
        pub(crate) fn len(&self) -> usize {
            self.0.len()
        }
    }

    impl<T> Stealer<T> {
        pub(crate) fn steal(&self) -> Steal<T> {
            self.0.steal()
        }
        pub(crate) fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
        pub(crate) fn len(&self) -> usize {
            self.0.len()
        }
    }
}

pub(crate) use imp::*;

/// Repeats a steal while it says `Retry`: `Some` item, or `None` once the queue is empty.
pub(crate) fn steal_retrying<T>(mut steal: impl FnMut() -> Steal<T>) -> Option<T> {
    loop {
        match steal() {
            Steal::Success(item) => return Some(item),
            Steal::Empty => return None,
            Steal::Retry => continue,
        }
    }
}

/// A waker that unparks the thread that made it: how a blocking `join` waits on the same waker
/// slot as `.await`, so a task needs no condvar of its own.
struct ThreadWaker(thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// A waker for the current thread (see `ThreadWaker`).
pub(crate) fn current_thread_waker() -> std::task::Waker {
    std::task::Waker::from(Arc::new(ThreadWaker(thread::current())))
}

/// Parks the current thread until unparked (spurious wake-ups allowed) or `deadline` passes.
/// Under loom there is no timed park: a model must unpark.
pub(crate) fn park_until(deadline: Option<std::time::Instant>) {
    match deadline {
        #[cfg(not(wheelpool_loom))]
        Some(d) => {
            let now = std::time::Instant::now();
            if d > now {
                thread::park_timeout(d - now);
            }
        }
        _ => thread::park(),
    }
}

/// Declares thread-locals: std's normally, loom's under `wheelpool_loom` (each loom thread then
/// gets its own value, as a real thread would). Written with std's `const { .. }` initialiser,
/// which the loom arm drops (loom has no const form).
macro_rules! thread_local_facade {
    ($($(#[$attr:meta])* static $name:ident: $t:ty = const { $init:expr };)+) => {
        #[cfg(not(wheelpool_loom))]
        std::thread_local! {
            $($(#[$attr])* static $name: $t = const { $init };)+
        }
        #[cfg(wheelpool_loom)]
        loom::thread_local! {
            $($(#[$attr])* static $name: $t = $init;)+
        }
    };
}
pub(crate) use thread_local_facade as thread_local;

/// std's atomics in both builds, for counters and ids that are no part of any protocol a model
/// explores (a round-robin deal, a pool's id): loom's atomics cannot live in a `static`, and these
/// need no exploring. Never use them for anything another thread synchronises on.
pub(crate) mod plain {
    pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
}

/// Cache-line padding for atomics and locks that different threads hit at once.
pub(crate) use crossbeam_utils::CachePadded;

/// Set once while a pool is built, before any other thread sees it: no protocol to model.
pub(crate) use std::sync::OnceLock;

/// Reference counting is not part of any protocol we model, and loom's `Arc` has no `Weak`
/// (which `Handle` needs), so both builds use std's.
pub(crate) use std::sync::{Arc, Weak};

/// A one-token parker: `unpark` before `park` is not lost. Built on the shim's lock and condvar so
/// loom can explore it, and with a deadline for the timer thread.
#[derive(Debug)]
pub(crate) struct Parker {
    notified: Mutex<bool>,
    cv: Condvar,
}

impl Parker {
    pub(crate) fn new() -> Self {
        Parker {
            notified: Mutex::new(false),
            cv: Condvar::new(),
        }
    }

    /// Blocks until `unpark` (or a token left by an earlier one) or until `deadline` passes.
    /// Under loom the deadline is ignored: a model must unpark.
    pub(crate) fn park(&self, deadline: Option<std::time::Instant>) {
        let mut notified = self.notified.lock();
        if !*notified {
            notified = wait_until(&self.cv, notified, deadline);
        }
        *notified = false;
    }

    /// Wakes the parked thread, or makes its next `park` return at once.
    pub(crate) fn unpark(&self) {
        *self.notified.lock() = true;
        self.cv.notify_one();
    }
}
