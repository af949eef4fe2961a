//! The outstanding count read while a thread of the same cell cancels and schedules
//! (`src/pool/counters.rs`: `ended_cancelled`, `admitted`, `Cell::outstanding`).
//!
//! A cancel counts its task out through `cancelled` alone, so a reader needs a cell's
//! `cancelled` and `outstanding` as of one instant. Read once each, the cancel of one task and
//! the admission of the next between the two loads would show both tasks outstanding: exactly
//! what `max_pending` must never see (a hostile review found schedules refused with
//! `Saturated` far below the bound).

use super::model;
use crate::pool::model::Counters;
use crate::sync::Arc;
use loom::thread;

/// One task outstanding; a thread of the same cell cancels it and schedules another, twice.
/// At every instant at most one task is outstanding, so no reading may say two, and after the
/// churn exactly one is.
#[test]
fn a_cancel_then_a_schedule_is_never_read_as_two_tasks() {
    model(
        "a_cancel_then_a_schedule_is_never_read_as_two_tasks",
        || {
            // One home cell: every thread counts on it.
            let counters = Arc::new(Counters::new(1, 1));
            counters.admitted();
            let churn = {
                let counters = counters.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        counters.ended_cancelled();
                        counters.admitted();
                    }
                })
            };
            let seen = counters.outstanding();
            assert!(
                seen <= 1,
                "read {seen} tasks outstanding, at most 1 ever was"
            );
            churn.join().unwrap();
            assert_eq!(counters.outstanding(), 1);
            assert_eq!(counters.stats().cancelled, 2);
        },
    );
}
