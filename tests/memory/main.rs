//! Tests that count the heap's live bytes (a counting global allocator): cancelled timers give
//! their memory back, churn from many threads keeps it flat, fired timers leave none behind.
//! One at a time ([`serial`]): another test allocating meanwhile would be counted too.

#[path = "../manual_common/mod.rs"]
mod manual_common;

mod adversary_storm;
mod churn;
mod memory_after_firing;

use cap::Cap;
use std::alloc::System;

/// Every allocation of this binary, counted.
#[global_allocator]
pub(crate) static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// Held by every test of this binary for its whole run (a failed test's poison is ignored).
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
