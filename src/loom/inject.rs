//! Fairness in time: the `injected` flag between pushes onto the injector and the workers that
//! lower it (`src/pool/queues.rs`, "Fairness in time": `mark_injected` after the fence in
//! `Sleep::notify`, `take_injected`).
//!
//! The promise: once the threads are done, no task waits on the injector with the flag
//! lowered, so a worker's next take looks at the injector before its own deque. A lowering
//! that hid a push (the worker's look missed it, the pusher saw the flag still up) would leave
//! a due timer behind the worker's local work until a fairness turn, dozens of runs later.
//! Taking out either fence lets the second model fail (the first, one worker, cannot show it).

use super::ModelPool;
use crate::sync::{Arc, Worker};
use crate::task::TaskRef;
use loom::thread;

/// No task on the injector with `injected` lowered.
fn assert_flag_covers_the_injector(pool: &ModelPool) {
    let queues = &pool.core.queues;
    assert!(
        !queues.has_work() || queues.injected(),
        "a task waits on the injector while `injected` is lowered"
    );
}

/// A worker lowers the flag (raised by an earlier push) and looks, while another thread
/// pushes: the look finds the new task, or the flag ends up raised.
#[test]
fn a_push_racing_a_worker_that_lowers_the_flag_is_not_hidden() {
    super::model(
        "a_push_racing_a_worker_that_lowers_the_flag_is_not_hidden",
        || {
            let pool = Arc::new(ModelPool::new(1));
            pool.push_counting_wakes(); // earlier work: the flag is up
            assert!(pool.core.queues.injected());
            let p = pool.clone();
            let pusher = thread::spawn(move || {
                p.push_counting_wakes();
            });
            let deque: Worker<TaskRef> = Worker::new_lifo();
            let took = pool.core.queues.take_injected(&deque);
            assert!(took.is_some(), "the earlier task was there before the look");
            pusher.join().unwrap();
            assert_flag_covers_the_injector(&pool);
        },
    );
}

/// Two workers race to lower the flag while a third thread pushes: a worker may lower it
/// after the pusher raised it again (having read the first worker's lowering), and its look
/// must then see the push.
#[test]
fn two_workers_lowering_the_flag_around_a_push_hide_nothing() {
    super::model(
        "two_workers_lowering_the_flag_around_a_push_hide_nothing",
        || {
            let pool = Arc::new(ModelPool::new(2));
            pool.push_counting_wakes();
            let p = pool.clone();
            let pusher = thread::spawn(move || {
                p.push_counting_wakes();
            });
            let p = pool.clone();
            let other = thread::spawn(move || {
                let deque: Worker<TaskRef> = Worker::new_lifo();
                drop(p.core.queues.take_injected(&deque));
            });
            let deque: Worker<TaskRef> = Worker::new_lifo();
            drop(pool.core.queues.take_injected(&deque));
            pusher.join().unwrap();
            other.join().unwrap();
            assert_flag_covers_the_injector(&pool);
        },
    );
}
