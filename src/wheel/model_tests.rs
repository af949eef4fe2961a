//! Model test of the timing wheel against a reference `BTreeMap<(deadline, seq), id>`.
//!
//! Random interleavings of insert (delays from 0 to years, deadlines near `u64::MAX`, deadlines
//! already in the past), remove (live and stale keys), advance (tiny to huge steps, sometimes
//! backwards, which must clamp), "run to the next expiration", staging, extraction by a
//! predicate and `shrink_to_fit`. After every step:
//! - the wheel yields exactly the reference's due set: nothing early, nothing twice, nothing lost;
//! - `len` matches, and `next_expiration` is `None` exactly when the wheel is empty, else within
//!   `[now, max(earliest deadline, now)]`;
//! - polling at `next_expiration` either yields (only entries due by then) or moves
//!   `next_expiration` strictly later, and at most 10 such empty stops come before the earliest
//!   entry comes out, exactly at its deadline;
//! - every value is dropped exactly once, at the moment it leaves the wheel and its receiver
//!   drops it (remove drops at once; nothing leaks when the wheel is dropped).
//!
//! 256 cases of up to 200 operations by default (plus 32 of up to 2000); set `PROPTEST_CASES`
//! for more.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;

use super::{Key, Wheel};
use proptest::prelude::*;

/// Drop counts by value id, shared by every value of one run.
type Drops = Rc<RefCell<Vec<u32>>>;

/// A wheel value that records its own drop.
#[derive(Debug)]
struct Tracked {
    id: usize,
    deadline: u64,
    drops: Drops,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.borrow_mut()[self.id] += 1;
    }
}

/// How far from `now` an inserted deadline lies.
#[derive(Clone, Debug)]
enum Delay {
    /// `now + d`, `d` small to years (at a 1 ms tick), saturating.
    After(u64),
    /// `now - d`, saturating: already due.
    Before(u64),
    /// `u64::MAX - d`.
    NearMax(u64),
}

/// One step of a run.
#[derive(Clone, Debug)]
enum Op {
    Insert(Delay),
    /// Remove the key issued `pick`-th (modulo the keys issued so far), live or stale.
    Remove(usize),
    /// Poll at `now + d` (saturating).
    Forward(u64),
    /// Poll at `now - d` (saturating): must clamp to `now`.
    Backward(u64),
    /// Poll at `now + d` (saturating) with a bounded budget: one step, maybe unfinished, so
    /// later operations meet the wheel half way through a poll.
    Step(u64, usize),
    /// Poll at `next_expiration()` until something comes out.
    RunToNext,
    /// Stage the coarse slots of the given level and up ahead, with this budget and horizon
    /// (no entry may come out). The level changes from one call to the next, as the timer's
    /// does with its slack.
    Stage(usize, usize, u64),
    /// `extract_some(from, budget)` of the entries whose id is a multiple of the third number
    /// (entries leave from anywhere in their lists, heads included).
    Extract(usize, usize, usize),
    /// `shrink_to_fit`: the free list is rebuilt, live entries keep their nodes.
    Shrink,
    /// `take_storage_if_empty(room)`, the storage dropped at once: an emptied timer shard's
    /// give-back.
    GiveBack(usize),
    /// Remove every key issued so far, live or stale, in issue order: the cancels that empty a
    /// shard.
    RemoveAll,
}

fn distance() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..4u64,
        4 => 0..64u64,
        4 => 0..5_000u64,
        3 => 0..(1u64 << 20),
        2 => 0..(1u64 << 40),
        1 => 0..(400u64 * 365 * 24 * 3600 * 1000), // 400 years of 1 ms ticks
        1 => any::<u64>(),
        1 => Just(u64::MAX),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let delay = prop_oneof![
        8 => distance().prop_map(Delay::After),
        1 => distance().prop_map(Delay::Before),
        1 => (0..70u64).prop_map(Delay::NearMax),
    ];
    prop_oneof![
        10 => delay.prop_map(Op::Insert),
        4 => any::<usize>().prop_map(Op::Remove),
        4 => distance().prop_map(Op::Forward),
        1 => distance().prop_map(Op::Backward),
        3 => (distance(), 0..20usize).prop_map(|(d, b)| Op::Step(d, b)),
        2 => Just(Op::RunToNext),
        3 => (1..5usize, 0..50usize, distance()).prop_map(|(f, b, h)| Op::Stage(f, b, h)),
        2 => (0..300usize, 0..300usize, 1..4usize).prop_map(|(f, b, m)| Op::Extract(f, b, m)),
        1 => Just(Op::Shrink),
        1 => prop_oneof![Just(0usize), 0..300usize, Just(4096)].prop_map(Op::GiveBack),
        1 => Just(Op::RemoveAll),
    ]
}

/// The wheel under test, the reference and the bookkeeping to compare them.
struct Run {
    wheel: Wheel<Tracked>,
    /// Live entries: `(deadline, id) -> ()`; ids are issued in order, so they double as `seq`.
    reference: BTreeMap<(u64, usize), ()>,
    /// Every key issued, with its id and deadline.
    keys: Vec<(Key, usize, u64)>,
    /// The keys of live entries: a key is reused only once its entry has left the wheel.
    live_keys: HashSet<Key>,
    drops: Drops,
}

impl Run {
    fn new() -> Self {
        Run {
            wheel: Wheel::new(),
            reference: BTreeMap::new(),
            keys: Vec::new(),
            live_keys: HashSet::new(),
            drops: Rc::new(RefCell::new(Vec::new())),
        }
    }

    fn insert(&mut self, delay: &Delay) {
        let now = self.wheel.now();
        let deadline = match *delay {
            Delay::After(d) => now.saturating_add(d),
            Delay::Before(d) => now.saturating_sub(d),
            Delay::NearMax(d) => u64::MAX - d,
        };
        let id = self.keys.len();
        self.drops.borrow_mut().push(0);
        let key = self.wheel.insert(
            deadline,
            Tracked {
                id,
                deadline,
                drops: self.drops.clone(),
            },
        );
        assert!(
            self.live_keys.insert(key),
            "a live entry's key was issued again: {key:?}"
        );
        self.keys.push((key, id, deadline));
        self.reference.insert((deadline, id), ());
    }

    fn remove(&mut self, pick: usize) {
        if self.keys.is_empty() {
            return;
        }
        let (key, id, deadline) = self.keys[pick % self.keys.len()];
        let live = self.reference.remove(&(deadline, id)).is_some();
        // Told apart by the id, as the pool tells tasks apart by identity.
        let got = self
            .wheel
            .remove(Key::from_u32(key.to_u32()), |v| v.id == id);
        match got {
            Some(value) => {
                self.live_keys.remove(&key);
                assert!(live, "removed a stale key's entry: id {id}");
                assert_eq!(value.id, id, "removed someone else's entry");
                assert_eq!(self.drops.borrow()[id], 0);
                drop(value);
                assert_eq!(self.drops.borrow()[id], 1, "dropped at once");
            }
            None => assert!(!live, "live key {id} not removed"),
        }
    }

    /// Polls at `at` and checks the yield against the reference; returns how many came out.
    fn poll(&mut self, at: u64) -> usize {
        self.poll_bounded(at, usize::MAX)
    }

    /// One bounded poll at `at`; checks the yield, and that nothing is left behind when it
    /// says it finished.
    fn poll_bounded(&mut self, at: u64, budget: usize) -> usize {
        let before = self.wheel.now();
        let mut out = Vec::new();
        let finished = self.wheel.poll_expired_bounded(at, budget, &mut out);
        assert!(out.len() <= budget, "over budget");
        let target = at.max(before);
        assert_eq!(self.wheel.now(), target, "time is clamped, never goes back");
        let mut seen = HashSet::new();
        for value in &out {
            assert!(
                value.deadline <= target,
                "early: {} > {target}",
                value.deadline
            );
            assert!(seen.insert(value.id), "yielded twice: {}", value.id);
            assert!(
                self.reference.remove(&(value.deadline, value.id)).is_some(),
                "not live"
            );
            self.live_keys.remove(&self.keys[value.id].0);
        }
        if let Some((&(deadline, id), _)) = self.reference.first_key_value().filter(|_| finished) {
            assert!(
                deadline > target,
                "lost: id {id} due {deadline}, now {target}"
            );
        }
        let count = out.len();
        let ids: Vec<usize> = out.iter().map(|v| v.id).collect();
        drop(out);
        assert!(ids.iter().all(|&id| self.drops.borrow()[id] == 1));
        count
    }

    /// Polls at `next_expiration` until something comes out: at most 10 empty stops, each
    /// moving `next_expiration` strictly later, then the earliest entry exactly at its deadline.
    fn run_to_next(&mut self) {
        let Some((&(earliest, _), _)) = self.reference.first_key_value() else {
            assert_eq!(self.wheel.next_expiration(), None);
            return;
        };
        let earliest = earliest.max(self.wheel.now());
        for _stop in 0..=10 {
            let at = self
                .wheel
                .next_expiration()
                .expect("non-empty wheel has an expiration");
            assert!(
                at <= earliest,
                "next_expiration {at} after earliest deadline {earliest}"
            );
            if self.poll(at) > 0 {
                assert_eq!(at, earliest, "first yield exactly at the earliest deadline");
                return;
            }
            assert!(
                self.wheel.next_expiration().expect("still non-empty") > at,
                "no progress"
            );
        }
        panic!("more than 10 empty stops before the earliest entry at {earliest}");
    }

    fn check(&self) {
        super::tests::check_invariants(&self.wheel);
        assert_eq!(self.wheel.len(), self.reference.len());
        assert_eq!(self.wheel.is_empty(), self.reference.is_empty());
        let now = self.wheel.now();
        match (
            self.wheel.next_expiration(),
            self.reference.first_key_value(),
        ) {
            (None, None) => {}
            (Some(at), Some((&(earliest, _), _))) => {
                assert!(at >= now, "next_expiration {at} before now {now}");
                assert!(
                    at <= earliest.max(now),
                    "next_expiration {at} after {earliest}"
                );
            }
            (got, want) => panic!("next_expiration {got:?} but earliest entry {want:?}"),
        }
        // Exactly the live values are undropped.
        let drops = self.drops.borrow();
        let undropped = drops.iter().filter(|&&d| d == 0).count();
        assert_eq!(undropped, self.reference.len());
        assert!(drops.iter().all(|&d| d <= 1), "double drop");
    }

    fn step(&mut self, op: &Op) {
        let now = self.wheel.now();
        match *op {
            Op::Insert(ref delay) => self.insert(delay),
            Op::Remove(pick) => self.remove(pick),
            Op::Forward(d) => {
                self.poll(now.saturating_add(d));
            }
            Op::Backward(d) => {
                self.poll(now.saturating_sub(d));
            }
            Op::Step(d, budget) => {
                self.poll_bounded(now.saturating_add(d), budget);
            }
            Op::RunToNext => self.run_to_next(),
            Op::Stage(from, budget, horizon) => {
                let moved = self.wheel.stage_ahead_from(from, budget, horizon);
                assert!(moved <= budget);
            }
            Op::Extract(from, budget, m) => {
                let mut out = Vec::new();
                self.wheel
                    .extract_some(from, budget, |v| v.id % m == 0, &mut out);
                for value in &out {
                    assert!(value.id % m == 0);
                    assert!(
                        self.reference.remove(&(value.deadline, value.id)).is_some(),
                        "extracted an entry that was not live"
                    );
                    self.live_keys.remove(&self.keys[value.id].0);
                }
            }
            Op::Shrink => self.wheel.shrink_to_fit(),
            Op::RemoveAll => {
                for pick in 0..self.keys.len() {
                    self.remove(pick);
                }
                assert!(self.wheel.is_empty());
            }
            Op::GiveBack(room) => {
                let (empty, before) = (self.wheel.is_empty(), self.wheel.capacity());
                let storage = self.wheel.take_storage_if_empty(room);
                assert_eq!(storage.is_some(), empty && before > room);
                if storage.is_some() {
                    assert!(self.wheel.capacity() <= room, "keeps only what fits");
                }
            }
        }
        self.check();
    }

    /// Drops the wheel and checks every value was dropped exactly once.
    fn finish(self) {
        let Run { wheel, drops, .. } = self;
        drop(wheel);
        assert!(
            drops.borrow().iter().all(|&d| d == 1),
            "leak or double drop at the end"
        );
    }
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    // No regression files: this test may only write its own source.
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Fewer, longer runs: crowded slots and long cascades.
fn long_config() -> ProptestConfig {
    let base = config();
    ProptestConfig {
        cases: (base.cases / 8).max(1),
        ..base
    }
}

proptest! {
    #![proptest_config(long_config())]

    #[test]
    fn long_runs_match_the_reference(ops in prop::collection::vec(op(), 1..2000)) {
        let mut run = Run::new();
        for op in &ops {
            run.step(op);
        }
        run.finish();
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn wheel_matches_the_reference(ops in prop::collection::vec(op(), 1..200)) {
        let mut run = Run::new();
        for op in &ops {
            run.step(op);
        }
        run.finish();
    }

    #[test]
    fn shrink_to_fit_and_drain_keep_the_model(
        ops in prop::collection::vec(op(), 1..200),
        cut in 0..200usize,
    ) {
        let mut run = Run::new();
        for (i, op) in ops.iter().enumerate() {
            run.step(op);
            if i == cut {
                run.wheel.shrink_to_fit();
                run.check();
            }
        }
        let mut rest = Vec::new();
        run.wheel.drain(&mut rest);
        let mut ids: Vec<usize> = rest.iter().map(|v| v.id).collect();
        ids.sort_unstable();
        let mut want: Vec<usize> = run.reference.keys().map(|&(_, id)| id).collect();
        want.sort_unstable();
        prop_assert_eq!(ids, want);
        drop(rest);
        run.reference.clear();
        run.live_keys.clear();
        run.check();
        // Every key names nothing after the drain.
        for &(key, id, _) in &run.keys {
            prop_assert!(run.wheel.remove(key, |v| v.id == id).is_none());
            prop_assert!(run.wheel.remove(key, |_| true).is_none());
        }
        run.finish();
    }
}
