//! wheelpool: a scheduled thread pool whose delays live in a hierarchical timing wheel and whose
//! due tasks run on a work-stealing pool.
//!
//! ```
//! use wheelpool::ScheduledThreadPool;
//! use std::time::Duration;
//!
//! let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
//! let timeout = pool.schedule(|| "timed out", Duration::from_secs(30)).unwrap();
//! let reply = pool.schedule(|| "reply", Duration::from_millis(5)).unwrap();
//! assert_eq!(reply.join(), Ok("reply"));
//! assert!(timeout.cancel()); // the reply came first: the timeout never runs
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod future;
mod pool;
mod sync;
mod task;
mod timer;
pub mod wheel;

pub use error::{BuildError, ScheduleError, TaskError};
pub use future::{CancelHandle, ScheduledFuture};
pub use pool::{Builder, Handle, PoolStats, ScheduledThreadPool};
pub use task::{MissedTicks, PendingTask, PeriodicOptions};
pub use timer::ManualClock;
