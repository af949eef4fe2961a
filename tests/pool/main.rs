//! The pool's integration tests, one binary with a folder per feature; the adversarial cases sit
//! beside the feature they attack:
//!
//! - `one_shot/`: one-shot tasks, cancel, futures, saturation (`max_pending`), edge-case delays;
//! - `periodic/`: fixed rate and fixed delay, dynamic delays, reset, cancel and lifecycle of
//!   periodic tasks;
//! - `manual_clock/`: virtual time, exact, and a model of the pool checked against it; the
//!   lateness distribution and queue depths of `PoolStats`, exact there;
//! - `lifecycle/`: the builder, shutdown and `shutdown_now` (and the graceful shutdown
//!   policies, raced against producers), dropping the pool, thread hooks, panics, wake-ups;
//! - `timer/`: the timer side under load (the watcher, a stress run, and the soak run, ignored
//!   by default).
//!
//! Timing-sensitive tests are in `tests/realtime/`, tests that count heap bytes in
//! `tests/memory/` (each binary runs its tests one at a time), the `postgres` feature's in
//! `tests/cluster/`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../manual_common/mod.rs"]
mod manual_common;

mod lifecycle;
mod manual_clock;
mod one_shot;
mod periodic;
mod timer;
