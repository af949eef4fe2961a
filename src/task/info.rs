//! What a task is called and what kind it is: `TaskKind`, `TaskInfo`, and the ids that tell
//! tasks apart.

use crate::sync::plain::{AtomicU64, Ordering};
use crate::sync::Arc;
use std::cell::Cell;
use std::fmt;

/// Which kind of task: how its runs are planned.
///
/// # Examples
///
/// ```
/// use wheelpool::{ScheduledThreadPool, TaskKind};
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let hour = Duration::from_secs(3600);
/// pool.schedule_at_fixed_rate(|| (), hour, hour).unwrap().detach();
/// let pending = pool.shutdown_now();
/// assert_eq!(pending[0].kind(), TaskKind::FixedRate);
/// assert!(TaskKind::FixedRate.is_periodic());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskKind {
    /// Runs once (`execute`, `schedule`, `schedule_at`).
    OneShot,
    /// `schedule_at_fixed_rate`.
    FixedRate,
    /// `schedule_with_fixed_delay`.
    FixedDelay,
    /// `schedule_with_dynamic_delay`.
    DynamicDelay,
    /// `schedule_at_dynamic_rate`.
    DynamicRate,
    /// `schedule_cron` (feature `cron`): at each occurrence of a calendar expression.
    Cron,
}

impl TaskKind {
    /// True for every kind that runs more than once.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!wheelpool::TaskKind::OneShot.is_periodic());
    /// assert!(wheelpool::TaskKind::DynamicDelay.is_periodic());
    /// ```
    pub fn is_periodic(self) -> bool {
        self != TaskKind::OneShot
    }

    /// The kind's name, as its `Debug` writes it (for tracing's fields).
    pub(crate) fn label(self) -> &'static str {
        match self {
            TaskKind::OneShot => "OneShot",
            TaskKind::FixedRate => "FixedRate",
            TaskKind::FixedDelay => "FixedDelay",
            TaskKind::DynamicDelay => "DynamicDelay",
            TaskKind::DynamicRate => "DynamicRate",
            TaskKind::Cron => "Cron",
        }
    }
}

/// A task's name, shared by every task scheduled from one options value (a clone of a
/// `TaskBuilder` does not copy the text). Thin (one pointer), so an unnamed task pays 8 bytes.
pub(crate) type Name = Arc<String>;

/// Who a task is: its id, its name (if it was given one) and its kind. Cheap to clone.
///
/// The pool's panic handler finds the task whose run panicked with
/// [`TaskInfo::panicking`]; a [`PendingTask`](crate::PendingTask) tells the same facts.
///
/// # Examples
///
/// ```
/// use wheelpool::{ScheduledThreadPool, TaskInfo, TaskKind};
/// use std::sync::{Arc, Mutex};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let s = seen.clone();
/// let pool = ScheduledThreadPool::builder()
///     .threads(1)
///     .panic_handler(move |_payload| {
///         let task = TaskInfo::panicking().expect("called for a task's run");
///         s.lock().unwrap().push((task.name().map(str::to_owned), task.kind()));
///     })
///     .build()
///     .unwrap();
/// pool.task().name("flush").execute(|| panic!("disk full")).unwrap();
/// pool.shutdown();
/// assert!(pool.await_termination(std::time::Duration::from_secs(10)));
/// assert_eq!(*seen.lock().unwrap(), [(Some("flush".to_owned()), TaskKind::OneShot)]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TaskInfo {
    id: u64,
    name: Option<Name>,
    kind: TaskKind,
}

impl TaskInfo {
    pub(crate) fn new(id: u64, name: Option<Name>, kind: TaskKind) -> Self {
        TaskInfo { id, name, kind }
    }

    /// The task's id: the same for its whole life (in its future's and handle's `Debug`, its
    /// `PendingTask`, its panics). Unique among the last 2^40 (about 10^12) tasks of the
    /// process: ids are 40 bits, kept in the task's header beside its state, and come round
    /// again after that many tasks (some 60 hours of five million tasks a second).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| (), Duration::from_secs(3600)).unwrap();
    /// let id = format!("id: {}", pool.shutdown_now()[0].id());
    /// assert!(format!("{f:?}").contains(&id));
    /// ```
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The name given with [`TaskBuilder::name`](crate::TaskBuilder::name), if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// pool.task().name("nightly").schedule(|| (), Duration::from_secs(3600)).unwrap().detach();
    /// assert_eq!(pool.shutdown_now()[0].name(), Some("nightly"));
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref().map(String::as_str)
    }

    /// The task's kind.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduledThreadPool, TaskKind};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// pool.schedule(|| (), Duration::from_secs(3600)).unwrap().detach();
    /// assert_eq!(pool.shutdown_now()[0].kind(), TaskKind::OneShot);
    /// ```
    pub fn kind(&self) -> TaskKind {
        self.kind
    }

    /// Inside the pool's panic handler: the task whose run panicked. `None` anywhere else, and
    /// for panics that are no task's run (a thread start or stop hook).
    ///
    /// The handler keeps its one-argument signature (`Fn(Box<dyn Any + Send>)`); this is how it
    /// learns which task panicked. A thread-local set only while the handler runs, so runs that
    /// do not panic pay nothing for it.
    ///
    /// # Examples
    ///
    /// See [`TaskInfo`].
    pub fn panicking() -> Option<TaskInfo> {
        PANICKING.with(|p| {
            let taken = p.take();
            let copy = taken.clone();
            p.set(taken);
            copy
        })
    }

    /// Runs `report` with `self` as the [`panicking`](Self::panicking) task of this thread.
    pub(crate) fn while_panicking<R>(self, report: impl FnOnce() -> R) -> R {
        struct Restore(Option<TaskInfo>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let before = self.0.take();
                drop(PANICKING.with(|p| p.replace(before)));
            }
        }
        let before = PANICKING.with(|p| p.replace(Some(self)));
        let _restore = Restore(before);
        report()
    }
}

crate::sync::thread_local! {
    /// The task whose panic this thread's panic handler is reporting.
    static PANICKING: Cell<Option<TaskInfo>> = const { Cell::new(None) };
    /// The ids this thread hands out next, `next..end` (a block taken from `NEXT_BLOCK`).
    static IDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Ids come in blocks of this many, so that producer threads do not meet on one counter.
const ID_BLOCK: u64 = 1024;

/// The first id of the next block any thread takes. Ids are no part of any protocol.
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);

/// A new task id (ids start at 1 and wrap after 2^40: see [`PackedId`]).
#[inline]
fn next_id() -> u64 {
    IDS.with(|ids| {
        let (mut next, mut end) = ids.get();
        if next == end {
            next = NEXT_BLOCK.fetch_add(ID_BLOCK, Ordering::Relaxed);
            end = next + ID_BLOCK;
        }
        ids.set((next + 1, end));
        next
    })
}

/// Bytes of a task's id kept in its header: 40 bits, the room the header's word has beside
/// the state, kind and shard bytes. A trillion tasks: at five million tasks a second (W4's
/// rate on the project's 2-core machine) ids come round again after some 60 hours.
const ID_BYTES: usize = 5;

/// A task's id as its header keeps it (five bytes, little-endian: no alignment, so it packs
/// beside the state, kind and shard bytes into one word).
#[derive(Clone, Copy)]
pub(crate) struct PackedId([u8; ID_BYTES]);

impl PackedId {
    /// The next id of this thread's block.
    #[inline]
    pub(crate) fn next() -> Self {
        let bytes = next_id().to_le_bytes();
        let mut id = [0; ID_BYTES];
        id.copy_from_slice(&bytes[..ID_BYTES]);
        PackedId(id)
    }

    #[inline]
    pub(crate) fn get(self) -> u64 {
        let mut bytes = [0; 8];
        bytes[..ID_BYTES].copy_from_slice(&self.0);
        u64::from_le_bytes(bytes)
    }
}

impl fmt::Debug for TaskInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskInfo")
            .field("id", &self.id)
            .field("name", &self.name())
            .field("kind", &self.kind)
            .finish()
    }
}
