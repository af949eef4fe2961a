//! The task pointer's count (`task/ptr.rs`): the drop that frees a cell comes after every use
//! of the cell through the other pointers, whichever thread drops last.
//!
//! The cell's closure captures a [`Witness`], a `Relaxed` flag that one thread holding a
//! pointer raises before it lets go, and that the closure's drop (when the cell is freed)
//! reads. Only the count's synchronisation can make that read see the flag: loom lets a
//! `Relaxed` load return any value that happens-before allows, so without the `Acquire` fence
//! before the free (after the last pointer's read of the count) this model fails.
//!
//! The second model gives the wheel's share up as a cancel does (`TaskPtr::orphan`): the cell
//! must still be freed exactly once, by whichever pointer goes last, after the canceller's use.
//! A drop that misses the mark leaves the cell unfreed (the count of frees is 0); one that
//! frees before the use is seen fails the witness. (Loom does not fail when only the fence
//! before the mark's read is removed: the mark's own `Acquire` also orders it. The ground
//! rules in `task/ptr.rs` give the argument.)

use super::{bare_one_shot, model};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

/// A flag that outlives the model's threads (leaked: one small box per execution).
#[derive(Clone, Copy)]
struct Witness(&'static AtomicBool);

/// Dropped with the closure, so when the cell is freed (the task never runs here).
struct OnFree(Witness);

impl Drop for OnFree {
    fn drop(&mut self) {
        assert!(
            self.0 .0.load(Ordering::Relaxed),
            "the cell was freed before a use through another pointer was seen"
        );
    }
}

#[test]
fn the_last_drop_frees_after_every_use_elsewhere() {
    model("the_last_drop_frees_after_every_use_elsewhere", || {
        let witness = Witness(Box::leak(Box::new(AtomicBool::new(false))));
        let on_free = OnFree(witness);
        let task = bare_one_shot(move || drop(on_free));
        // One thread uses the cell, then drops its two pointers; another only clones and drops
        // (its subtraction may come between the user's and the last); the future's pointer is
        // dropped here, at any point between.
        let user = {
            let mine = task.to_raw();
            thread::spawn(move || {
                let again = mine.clone();
                drop(mine);
                witness.0.store(true, Ordering::Relaxed);
                drop(again);
            })
        };
        let other = {
            let mine = task.to_raw();
            thread::spawn(move || drop(mine.clone()))
        };
        drop(task);
        user.join().unwrap();
        other.join().unwrap();
    });
}

/// Counts the frees of the cell, and checks the witness as [`OnFree`] does.
struct CountedFree(Witness, &'static AtomicUsize);

impl Drop for CountedFree {
    fn drop(&mut self) {
        assert!(
            self.0 .0.load(Ordering::Relaxed),
            "the cell was freed before the canceller's use was seen"
        );
        self.1.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_share_given_up_leaves_the_cell_to_the_last_pointer_on_any_thread() {
    model(
        "a_share_given_up_leaves_the_cell_to_the_last_pointer_on_any_thread",
        || {
            let witness = Witness(Box::leak(Box::new(AtomicBool::new(false))));
            let frees: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
            let on_free = CountedFree(witness, frees);
            let task = bare_one_shot(move || drop(on_free));
            // The wheel's pointer, which the canceller unlinks and gives up while it holds its
            // own (a handle's); another handle is dropped elsewhere, the future's here.
            let wheel = task.to_raw();
            let canceller = {
                let mine = task.to_raw();
                thread::spawn(move || {
                    wheel.orphan();
                    witness.0.store(true, Ordering::Relaxed);
                    drop(mine);
                })
            };
            let other = {
                let mine = task.to_raw();
                thread::spawn(move || drop(mine))
            };
            drop(task);
            canceller.join().unwrap();
            other.join().unwrap();
            assert_eq!(frees.load(Ordering::Relaxed), 1, "freed exactly once");
        },
    );
}
