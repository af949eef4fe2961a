//! Unit tests of [`Wheel`] through its public methods, plus checks of the internal layout
//! invariants after each step. The randomized model test is `tests/wheel_model.rs`.

use super::*;
use std::collections::BTreeSet;

/// Checks the links of `list`, whose id is `id`: its first node carries the id's head mark,
/// every other node's back link names the node before it.
fn check_links<T>(wheel: &Wheel<T>, list: List, id: u32) {
    let mut at = list.head();
    let mut prev = NIL;
    while at != NIL {
        if prev == NIL {
            assert_eq!(wheel.slab.head_of(at), Some(id), "head mark of list {id}");
        } else {
            assert_eq!(wheel.slab.head_of(at), None, "a second head in list {id}");
            assert_eq!(wheel.slab.prev(at), prev, "back link in list {id}");
        }
        prev = at;
        at = wheel.slab.next(at);
    }
}

/// Checks the ground rules: every entry is in the list its deadline and the cursor name, each
/// list's links and head mark are right, the bitmaps match the lists, and `len` counts them all.
pub(super) fn check_invariants<T>(wheel: &Wheel<T>) {
    wheel.check_cascade_rules();
    check_links(wheel, wheel.due, DUE_LIST);
    check_links(wheel, wheel.cascading.list, CASCADING_LIST);
    check_links(wheel, wheel.cascading.back, BACK_LIST);
    let mut seen = 0;
    let mut at = wheel.due.head();
    while at != NIL {
        assert!(wheel.slab.deadline(at) <= wheel.now);
        seen += 1;
        at = wheel.slab.next(at);
    }
    let mut at = wheel.cascading.list.head();
    while at != NIL {
        let deadline = wheel.slab.deadline(at);
        assert_eq!(
            slot_for(deadline, wheel.cascading.level),
            wheel.cascading.slot
        );
        seen += 1;
        at = wheel.slab.next(at);
    }
    let mut at = wheel.cascading.back.head();
    while at != NIL {
        // Sent back by a flip: linked at the cursor's own slot of the level below, and due in
        // the cascading slot.
        let deadline = wheel.slab.deadline(at);
        let finer = wheel.cascading.level - 1;
        assert_eq!(slot_for(deadline, finer), 0);
        assert_eq!(
            slot_for(deadline, wheel.cascading.level),
            wheel.cascading.slot
        );
        seen += 1;
        at = wheel.slab.next(at);
    }
    for (l, buffers) in wheel.levels.iter().enumerate() {
        let live = wheel.live_buffer(l);
        for (b, level) in buffers.iter().enumerate() {
            for slot in 0..bits::SLOTS {
                let list = level.slot(slot);
                assert_eq!(
                    list.is_empty(),
                    !level.is_occupied(slot),
                    "bitmap of level {l} buffer {b}"
                );
                check_links(wheel, list, level_base(l, b) + slot as u32);
                let mut at = list.head();
                while at != NIL {
                    let deadline = wheel.slab.deadline(at);
                    assert_eq!(slot_for(deadline, l), slot);
                    if b == live {
                        assert!(deadline > wheel.cursor);
                        assert_eq!(level_for(wheel.cursor, deadline), l);
                    } else {
                        // Staged for slot `stage[l + 1]` of the next level up, which is still
                        // ahead of the cursor there (see stage.rs).
                        let up = l + 1;
                        assert!(up < NUM_LEVELS && wheel.stage[up] != NO_STAGE, "level {l}");
                        let staged = usize::from(wheel.stage[up]);
                        assert_eq!(slot_for(deadline, up), staged);
                        assert!(staged > slot_for(wheel.cursor, up));
                        assert!(level_for(wheel.cursor, deadline) == up);
                    }
                    seen += 1;
                    at = wheel.slab.next(at);
                }
            }
        }
    }
    assert_eq!(seen, wheel.len());
}

fn poll<T>(wheel: &mut Wheel<T>, now: u64) -> Vec<T> {
    let mut out = Vec::new();
    wheel.poll_expired(now, &mut out);
    check_invariants(wheel);
    out
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

#[test]
fn wheel_and_key_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Wheel<u32>>();
    assert_send_sync::<Key>();
}

#[test]
fn never_yields_early_across_every_level() {
    for level in 0..NUM_LEVELS as u32 {
        let deadline = 1u64 << (level * bits::LEVEL_BITS).min(63);
        for start in [0, deadline / 2, deadline - 1] {
            let mut wheel = Wheel::new();
            poll(&mut wheel, start);
            wheel.insert(deadline, deadline);
            check_invariants(&wheel);
            assert!(poll(&mut wheel, deadline - 1).is_empty(), "level {level}");
            assert_eq!(poll(&mut wheel, deadline), [deadline], "level {level}");
            assert!(wheel.is_empty());
        }
    }
}

#[test]
fn deadlines_at_or_before_now_are_due_at_the_next_poll() {
    let mut wheel = Wheel::new();
    wheel.insert(0, 0);
    assert_eq!(wheel.next_expiration(), Some(0));
    assert_eq!(poll(&mut wheel, 0), [0]);
    poll(&mut wheel, 500);
    wheel.insert(500, 500);
    wheel.insert(3, 3);
    assert_eq!(wheel.next_expiration(), Some(500));
    // A poll "in the past" is clamped but still hands out what is due.
    assert_eq!(sorted(poll(&mut wheel, 10)), [3, 500]);
    assert_eq!(wheel.now(), 500);
}

#[test]
fn remove_works_in_the_due_list_and_in_every_level() {
    let mut wheel = Wheel::new();
    poll(&mut wheel, 100);
    let late = wheel.insert(1, 1);
    let keys: Vec<Key> = (0..64).map(|b| wheel.insert(100 + (1 << b), b)).collect();
    check_invariants(&wheel);
    assert_eq!(wheel.remove(late, |&v| v == 1), Some(1));
    for (b, &key) in keys.iter().enumerate().rev() {
        assert_eq!(wheel.remove(key, |&v| v == b as u64), Some(b as u64));
        check_invariants(&wheel);
    }
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiration(), None);
    assert!(keys
        .iter()
        .all(|&key| wheel.remove(key, |_| true).is_none()));
}

#[test]
fn stale_keys_never_remove_another_entry() {
    let mut wheel = Wheel::new();
    let fired = wheel.insert(5, "fired");
    assert_eq!(poll(&mut wheel, 5), ["fired"]);
    let other = wheel.insert(50, "other");
    assert_eq!(other.index, fired.index, "the node is reused");
    assert_eq!(wheel.remove(fired, |v| *v == "fired"), None);
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.remove(Key::from_u32(u32::MAX), |_| true), None);
    assert_eq!(
        wheel.remove(Key::from_u32(1), |_| true),
        None,
        "never issued"
    );
    assert_eq!(wheel.remove(other, |v| *v == "other"), Some("other"));
    assert_eq!(wheel.remove(other, |_| true), None, "a vacant node");
}

#[test]
fn u64_max_deadlines_and_time() {
    let mut wheel = Wheel::new();
    wheel.insert(u64::MAX, 1);
    wheel.insert(u64::MAX - 1, 2);
    wheel.insert(1 << 63, 3);
    check_invariants(&wheel);
    assert_eq!(wheel.next_expiration(), Some(1 << 63));
    assert_eq!(poll(&mut wheel, u64::MAX - 2), [3]);
    assert_eq!(wheel.next_expiration(), Some(u64::MAX - 1));
    assert_eq!(poll(&mut wheel, u64::MAX - 1), [2]);
    assert_eq!(poll(&mut wheel, u64::MAX), [1]);
    wheel.insert(u64::MAX, 4);
    wheel.insert(0, 5);
    assert_eq!(wheel.next_expiration(), Some(u64::MAX));
    assert_eq!(sorted(poll(&mut wheel, u64::MAX)), [4, 5]);
}

#[test]
fn a_huge_jump_hops_between_slots_instead_of_ticking() {
    let mut wheel = Wheel::new();
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    let mut deadlines = Vec::new();
    for _ in 0..10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let deadline = x >> (x % 64);
        deadlines.push(deadline);
        wheel.insert(deadline, deadline);
    }
    // Stepping tick by tick would never finish; this is a handful of bitmap hops per slot.
    let out = poll(&mut wheel, u64::MAX);
    assert_eq!(sorted(out), sorted(deadlines));
    assert!(wheel.is_empty());
}

#[test]
fn next_expiration_reaches_each_deadline_without_overshooting() {
    let deadlines = [7, 63, 64, 100, 4095, 4096, 70_000, 1 << 40, u64::MAX];
    let mut wheel = Wheel::new();
    for &deadline in &deadlines {
        wheel.insert(deadline, deadline);
    }
    let mut yielded = Vec::new();
    let mut stops = 0;
    while let Some(at) = wheel.next_expiration() {
        let earliest = deadlines[yielded.len()];
        assert!(at >= wheel.now() && at <= earliest, "{at} vs {earliest}");
        let out = poll(&mut wheel, at);
        assert!(
            out.iter().all(|&d| d == at),
            "only entries due exactly then"
        );
        if out.is_empty() {
            stops += 1;
            assert!(
                wheel.next_expiration().unwrap() > at,
                "progress after a cascade stop"
            );
        }
        yielded.extend(out);
        assert!(stops <= 10 * deadlines.len());
    }
    assert_eq!(yielded, deadlines);
}

#[test]
fn drain_empties_every_list_and_keeps_now() {
    let mut wheel = Wheel::new();
    poll(&mut wheel, 1000);
    let keys: Vec<Key> = [0, 1000, 1001, 5000, u64::MAX]
        .map(|d| wheel.insert(d, d))
        .to_vec();
    let mut all = Vec::new();
    wheel.drain(&mut all);
    assert_eq!(sorted(all), [0, 1000, 1001, 5000, u64::MAX]);
    check_invariants(&wheel);
    assert!(wheel.is_empty());
    assert_eq!(wheel.now(), 1000);
    assert_eq!(wheel.next_expiration(), None);
    assert!(keys
        .iter()
        .all(|&key| wheel.remove(key, |_| true).is_none()));
}

#[test]
fn values_are_dropped_once_and_at_once() {
    use std::rc::Rc;
    let token = Rc::new(());
    let mut wheel = Wheel::new();
    let keys: Vec<Key> = (0..100)
        .map(|d| wheel.insert(d * 97, Rc::clone(&token)))
        .collect();
    assert_eq!(Rc::strong_count(&token), 101);
    drop(wheel.remove(keys[50], |_| true));
    assert_eq!(
        Rc::strong_count(&token),
        100,
        "remove hands the value out; no copy kept"
    );
    drop(poll(&mut wheel, 97 * 10));
    assert_eq!(Rc::strong_count(&token), 89);
    wheel.shrink_to_fit();
    assert_eq!(Rc::strong_count(&token), 89);
    drop(wheel);
    assert_eq!(
        Rc::strong_count(&token),
        1,
        "dropping the wheel drops what it holds"
    );
}

#[test]
fn shrink_to_fit_after_mass_removal_keeps_the_wheel_working() {
    let mut wheel = Wheel::new();
    let keys: Vec<Key> = (0..5000).map(|d| wheel.insert(d * 13 + 1, d)).collect();
    let before = wheel.capacity();
    for &key in &keys[100..] {
        wheel.remove(key, |_| true);
    }
    wheel.shrink_to_fit();
    assert!(wheel.capacity() < before / 10);
    check_invariants(&wheel);
    let again: BTreeSet<u64> = (0..100).map(|d| d * 13 + 1).collect();
    let out: BTreeSet<u64> = poll(&mut wheel, u64::MAX)
        .into_iter()
        .map(|d| d * 13 + 1)
        .collect();
    assert_eq!(out, again);
    assert!(keys
        .iter()
        .all(|&key| wheel.remove(key, |_| true).is_none()));
}

/// An empty wheel's storage past the room it keeps comes out (a held one does not), and the
/// wheel goes on in the room it kept: its time and its old keys stay as they were.
#[test]
fn the_storage_of_an_empty_wheel_comes_out_and_the_wheel_goes_on() {
    let mut wheel = Wheel::new();
    let keys: Vec<Key> = (0..5000).map(|d| wheel.insert(d * 13 + 1, d)).collect();
    assert!(wheel.take_storage_if_empty(0).is_none(), "it holds entries");
    assert_eq!(wheel.len(), 5000);
    let mut due = poll(&mut wheel, 1_000);
    due.sort_unstable();
    assert_eq!(
        due,
        (0..77).collect::<Vec<_>>(),
        "deadlines 1..=989 are due by 1000"
    );
    for &key in &keys {
        wheel.remove(key, |_| true);
    }
    assert!(wheel.is_empty() && wheel.capacity() >= 5000);
    assert!(
        wheel.take_storage_if_empty(1 << 20).is_none(),
        "no more room than that"
    );
    let storage = wheel.take_storage_if_empty(1000).expect("empty");
    // Chunks of 64, 128, 256 and 512 entries stay (960 entries' room); the ones of 1024, 2048
    // and 4096 come out.
    assert_eq!(format!("{storage:?}"), "Storage(7168 nodes)");
    drop(storage);
    assert_eq!(wheel.capacity(), 960);
    assert_eq!(wheel.now(), 1_000, "time is kept");
    check_invariants(&wheel);
    assert!(keys
        .iter()
        .all(|&key| wheel.remove(key, |_| true).is_none()));
    let late = wheel.insert(1_500, 1);
    assert!(poll(&mut wheel, 1_499).is_empty(), "never early");
    assert_eq!(poll(&mut wheel, 1_500), [1]);
    assert!(wheel.remove(late, |_| true).is_none());
    // It grows past the room it kept again, and gives it all back on request.
    let more: Vec<Key> = (0..3000).map(|d| wheel.insert(2_000 + d, d)).collect();
    check_invariants(&wheel);
    for &key in &more {
        assert!(wheel.remove(key, |_| true).is_some());
    }
    assert!(wheel.take_storage_if_empty(0).is_some());
    assert_eq!(wheel.capacity(), 0);
}

#[test]
fn debug_shows_position_without_values() {
    struct Opaque;
    let mut wheel = Wheel::new();
    wheel.insert(9, Opaque);
    let text = format!("{wheel:?}");
    assert!(text.contains("now: 0") && text.contains("len: 1"), "{text}");
}

/// A storm of equal deadlines comes out in bounded steps, with inserts and removes between the
/// steps, and nothing is early, lost or doubled.
#[test]
fn bounded_polls_interleave_with_inserts_and_removes() {
    let mut wheel = Wheel::new();
    let mut keys = Vec::new();
    for i in 0..2_000u64 {
        keys.push((wheel.insert(5_000 + (i % 3), i), i)); // one level-2 slot
    }
    wheel.insert(100_000, 99_999); // far: must stay
    let mut out = Vec::new();
    let mut removed = Vec::new();
    let mut steps = 0u64;
    while !wheel.poll_expired_bounded(5_001, 64, &mut out) {
        steps += 1;
        check_invariants(&wheel);
        assert_eq!(wheel.next_expiration(), Some(5_001));
        // Remove a few that have not come out yet (the nodes of those that did may hold newer
        // entries: the value tells them apart).
        for (key, i) in keys.drain(..3.min(keys.len())) {
            removed.extend(wheel.remove(key, |&v| v == i));
        }
        // Inserts between steps: one already due, one later than the poll's target.
        wheel.insert(4_000, 10_000 + steps);
        wheel.insert(5_002, 20_000 + steps);
        assert!(out.len() as u64 <= 64 * (steps + 1));
    }
    check_invariants(&wheel);
    assert!(steps > 10, "a storm takes many bounded steps, took {steps}");
    let mut expected: Vec<u64> = (0..2_000u64)
        .filter(|i| i % 3 != 2 && !removed.contains(i))
        .chain((1..=steps).map(|s| 10_000 + s))
        .collect();
    expected.sort_unstable();
    let mut got = out.clone();
    got.sort_unstable();
    assert_eq!(got, expected, "exactly the due entries, once each");
    let mut rest = Vec::new();
    wheel.poll_expired(u64::MAX, &mut rest);
    assert_eq!(
        out.len() + rest.len() + removed.len(),
        2_001 + 2 * steps as usize
    );
    check_invariants(&wheel);
}

/// Staging a crowded coarse slot ahead (see stage.rs) keeps every rule: the staged entries come
/// out exactly at their deadlines, in deadline order across steps of one tick, including those
/// whose digit one level down is the slot's first (they rejoin the cascade), those inserted into
/// the slot after staging began, and after removes of staged entries.
#[test]
fn staged_slots_come_out_exactly_at_their_deadlines() {
    for level in 1..4usize {
        let span = 1u64 << (6 * level); // one slot of `level`
        let base = span * 5; // slot 5 of `level`
        let mut wheel = Wheel::new();
        let mut want = Vec::new();
        let mut keys = Vec::new();
        // Every digit one level down, the first sub-slot's first tick included.
        for sub in 0..64u64 {
            let deadline = base + sub * (span / 64) + (sub % 3).min(span / 64 - 1);
            keys.push((wheel.insert(deadline, deadline), deadline));
            want.push(deadline);
        }
        check_invariants(&wheel);
        let mut moved = 0;
        loop {
            let step = wheel.stage_ahead(7, u64::MAX);
            check_invariants(&wheel);
            if step == 0 {
                break;
            }
            moved += step;
        }
        assert!(moved >= 64, "level {level}: staged {moved}");
        // Removes of staged entries, and an insert into the slot after staging.
        for &(key, deadline) in keys.iter().step_by(5) {
            assert_eq!(wheel.remove(key, |&v| v == deadline), Some(deadline));
            want.retain(|&d| d != deadline);
            check_invariants(&wheel);
        }
        let late = base + span / 2 + 1; // may share its tick with a staged entry
        wheel.insert(late, late);
        want.push(late);
        want.sort_unstable();
        check_invariants(&wheel);
        // Tick by tick near each deadline (and a hop between): each comes out exactly then.
        let mut got = Vec::new();
        let mut ticks = want.clone();
        ticks.dedup();
        for &deadline in &ticks {
            assert!(
                poll(&mut wheel, deadline - 1).is_empty(),
                "early at level {level}"
            );
            let out = poll(&mut wheel, deadline);
            assert!(
                !out.is_empty() && out.iter().all(|&d| d == deadline),
                "level {level}"
            );
            got.extend(out);
            wheel.stage_ahead(3, u64::MAX);
            check_invariants(&wheel);
        }
        assert_eq!(got, want);
        assert!(wheel.is_empty());
    }
}

/// Adversarial: crowds of entries on and around coarse slot boundaries (levels 1-4 and the top
/// level), with staging of random budget and horizon interleaved with bounded polls, removes,
/// `extract_some`, `shrink_to_fit` and `drain`, checked against a reference after every step:
/// nothing early, nothing lost, nothing twice, `next_expiration` a lower bound.
#[test]
fn staging_survives_crowded_boundaries_scans_shrinks_and_drains() {
    use std::collections::BTreeMap;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut staged = 0;
    for round in 0..30 {
        let mut wheel = Wheel::new();
        // value -> (deadline, key)
        let mut model: BTreeMap<u64, (u64, Key)> = BTreeMap::new();
        let mut next_value = 0u64;
        let start = match round % 4 {
            0 => 0,
            1 => rand() % (1 << 30),
            2 => u64::MAX - (1 << 20) - rand() % (1 << 20),
            _ => (1u64 << 60) - 1 - rand() % 5_000,
        };
        poll(&mut wheel, start);
        for _ in 0..1_500 {
            let now = wheel.now();
            match rand() % 16 {
                0..=5 => {
                    // Near a slot boundary of a coarse level ahead of now.
                    let level = [1, 2, 3, 4, 10][(rand() % 5) as usize];
                    let span = 1u64 << (6 * level); // the top level's slots span 2^60
                    let base = (now / span)
                        .saturating_add(1 + rand() % 2)
                        .saturating_mul(span);
                    let offset = match rand() % 4 {
                        0 => 0,
                        1 => rand() % 64,
                        2 => 63 + rand() % 3,
                        _ => rand() % span,
                    };
                    let deadline = if rand() % 8 == 0 {
                        now.saturating_sub(rand() % 3)
                    } else {
                        base.saturating_add(offset)
                    };
                    let key = wheel.insert(deadline, next_value);
                    model.insert(next_value, (deadline, key));
                    next_value += 1;
                }
                6 | 7 => {
                    if let Some((&v, &(_, key))) =
                        model.iter().nth(rand() as usize % model.len().max(1))
                    {
                        assert_eq!(wheel.remove(key, |&x| x == v), Some(v));
                        model.remove(&v);
                    }
                }
                8 | 9 => {
                    let budget = (rand() % 40) as usize;
                    let horizon = match rand() % 3 {
                        0 => u64::MAX,
                        1 => rand() % (1 << 20),
                        _ => rand() % 64,
                    };
                    let before = wheel.len();
                    staged += wheel.stage_ahead(budget, horizon);
                    assert_eq!(wheel.len(), before, "staging yields nothing");
                }
                10..=12 => {
                    // Bounded poll to the next expiration (or a bit past it), maybe unfinished.
                    let to = match wheel.next_expiration() {
                        Some(at) if rand() % 2 == 0 => at,
                        Some(at) => at.saturating_add(rand() % 100),
                        None => now.saturating_add(rand() % 1_000),
                    };
                    let mut out = Vec::new();
                    let done = wheel.poll_expired_bounded(to, (rand() % 30) as usize, &mut out);
                    let target = wheel.now();
                    for v in &out {
                        let (deadline, _) = model.remove(v).expect("yielded twice or unknown");
                        assert!(deadline <= target, "early: {deadline} at {target}");
                    }
                    if done {
                        assert!(model.values().all(|&(d, _)| d > target), "lost at {target}");
                    }
                }
                13 => {
                    let mut out = Vec::new();
                    let mut from = Some(rand() as usize % (wheel.capacity() + 1));
                    let odd = rand() % 2;
                    while let Some(at) = from {
                        from = wheel.extract_some(at, 7, |v| v % 2 == odd, &mut out);
                    }
                    for v in out {
                        assert_eq!(v % 2, odd);
                        model.remove(&v).expect("extracted twice or unknown");
                    }
                }
                14 => wheel.shrink_to_fit(),
                _ => {
                    if rand() % 20 == 0 {
                        let mut out = Vec::new();
                        wheel.drain(&mut out);
                        assert_eq!(out.len(), model.len());
                        for v in out {
                            model.remove(&v).expect("drained twice or unknown");
                        }
                    }
                }
            }
            check_invariants(&wheel);
            assert_eq!(wheel.len(), model.len());
            let earliest = model.values().map(|&(d, _)| d).min();
            match (wheel.next_expiration(), earliest) {
                (None, None) => {}
                (Some(at), Some(e)) => {
                    assert!(
                        at >= wheel.now() && at <= e.max(wheel.now()),
                        "next {at}, earliest {e}"
                    );
                }
                (got, want) => panic!("next_expiration {got:?}, earliest {want:?}"),
            }
        }
        // Everything left comes out, once, never early.
        let mut out = Vec::new();
        wheel.poll_expired(u64::MAX, &mut out);
        for v in out {
            model.remove(&v).expect("yielded twice or unknown");
        }
        assert!(model.is_empty(), "lost {} entries", model.len());
    }
    assert!(staged > 1_000, "staged only {staged} entries");
}

/// A bounded poll that reaches a staged slot does at most its budget of work under the caller's
/// lock, even when every staged entry has the cursor's digit below (equal deadlines on a
/// 64-tick boundary: a storm's deadline lands on one once in 64). Unstaging relinked all of
/// them back in one go: with 300 000 such entries a step with a budget of 1 took 8 ms in debug
/// (0.6 ms in release); bounded, some microseconds. Best of three rounds against noise.
#[test]
fn a_bounded_poll_reaching_a_staged_slot_of_equal_aligned_deadlines_stays_bounded() {
    let n = 300_000u64;
    let deadline = 64 * 1_000; // level 1, slot 40 once polled to 63 360; digit 0 at level 0
    let mut best = std::time::Duration::MAX;
    for _ in 0..3 {
        let mut wheel = Wheel::new();
        for i in 0..n {
            wheel.insert(deadline, i);
        }
        poll(&mut wheel, 64 * 990);
        while wheel.stage_ahead(512, u64::MAX) == 512 {}
        let mut out = Vec::new();
        let mut longest = std::time::Duration::ZERO;
        for step in 1..=3 {
            let start = std::time::Instant::now();
            wheel.poll_expired_bounded(deadline, 1, &mut out);
            longest = longest.max(start.elapsed());
            assert!(out.len() <= step, "more than the budget came out");
        }
        check_invariants(&wheel);
        wheel.poll_expired(deadline, &mut out);
        assert_eq!(out.len() as u64, n);
        assert!(wheel.is_empty());
        best = best.min(longest);
    }
    let bound = if cfg!(debug_assertions) { 3_000 } else { 300 };
    assert!(
        best < std::time::Duration::from_micros(bound),
        "three steps with a budget of 1 took {best:?}: the staged slot was relinked in one go"
    );
}

/// `stage_ahead_from` leaves the slots of levels below `from` alone: they cascade when they
/// come, and everything still comes out exactly at its deadline.
#[test]
fn staging_from_a_level_leaves_finer_slots_to_their_cascade() {
    let mut wheel = Wheel::new();
    // One slot each at levels 1, 2 and 3 (counted from 0), eight entries in each.
    let bases = [64 * 5, 4_096 * 5, 262_144 * 5];
    let mut want = Vec::new();
    for base in bases {
        for i in 0..8u64 {
            let deadline = base + i * 7 + 1;
            wheel.insert(deadline, deadline);
            want.push(deadline);
        }
    }
    let mut staged = 0;
    loop {
        let step = wheel.stage_ahead_from(3, 5, u64::MAX);
        check_invariants(&wheel);
        if step == 0 {
            break;
        }
        staged += step;
    }
    assert_eq!(staged, 8, "only the level-3 slot's entries move");
    assert_eq!(wheel.stage_ahead_from(3, 64, u64::MAX), 0);
    // Levels 1 and 2 are still there to stage for a caller that asks from level 1.
    assert_eq!(wheel.stage_ahead(64, u64::MAX), 16);
    want.sort_unstable();
    let mut got = Vec::new();
    for &deadline in &want {
        assert!(poll(&mut wheel, deadline - 1).is_empty(), "early");
        got.extend(poll(&mut wheel, deadline));
    }
    assert_eq!(got, want);
    assert!(wheel.is_empty());
}
