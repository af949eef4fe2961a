//! wheelpool behind the workloads' [`Timer`] trait, through the public API of DESIGN.md only:
//! `ScheduledThreadPool::builder().threads(n).tick(d).build()`, `schedule(f, delay)`,
//! `execute(f)`, `schedule_at_fixed_rate(f, init, period)` and `ScheduledFuture::cancel`.

use std::time::Duration;

use wheelpool::{ScheduledFuture, ScheduledThreadPool};

use crate::timer::Timer;

/// wheelpool: a hierarchical timing wheel driven by one timer thread, due tasks on a
/// work-stealing pool of `workers` threads; `tick` defaults to the library's (1 ms).
pub(crate) struct WheelTimer {
    pool: ScheduledThreadPool,
}

impl Timer for WheelTimer {
    type Handle = ScheduledFuture<()>;

    fn build(workers: usize, tick: Option<Duration>) -> Self {
        let mut builder = ScheduledThreadPool::builder().threads(workers);
        if let Some(tick) = tick {
            builder = builder.tick(tick);
        }
        let pool = builder.build().expect("cannot build the wheelpool pool");
        WheelTimer { pool }
    }

    fn schedule<F: FnOnce() + Send + 'static>(&self, f: F, delay: Duration) -> Self::Handle {
        self.pool
            .schedule(f, delay)
            .expect("wheelpool refused a schedule")
    }

    fn cancel(&self, handle: Self::Handle) {
        handle.cancel();
    }

    fn execute<F: FnOnce() + Send + 'static>(&self, f: F) {
        self.pool.execute(f).expect("wheelpool refused an execute");
    }

    fn schedule_at_fixed_rate<F: FnMut() + Send + 'static>(
        &self,
        f: F,
        init: Duration,
        period: Duration,
    ) -> Self::Handle {
        self.pool
            .schedule_at_fixed_rate(f, init, period)
            .expect("wheelpool refused a fixed-rate schedule")
    }
}
