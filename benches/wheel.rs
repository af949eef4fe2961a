//! Micro-benchmarks of the timing wheel against `std::collections::BinaryHeap`.
//!
//! Each benchmark keeps `n` entries live (1e4, 1e5, 1e6) and reports time per operation:
//! - `insert`: insert into a full structure whose free nodes were left by random removals (the
//!   steady state of a timer service), timed; the removals that make room are not.
//! - `remove`: remove random live keys (cancellation), timed; the re-inserts are not. At 1e6
//!   entries the structures outgrow the caches and the TLB, so this measures misses: the
//!   wheel's unlink touches the node and both neighbours (two dependent misses), the lazy heap
//!   only its side-table entry (one).
//! - `cancel_recent`: remove, oldest first, the 1024 entries inserted just before (an RPC
//!   timeout cancelled when the reply comes), timed: the structure's own cost, cache-warm.
//! - `poll`: advance time so that about 1024 entries come due, timed per entry handed out,
//!   cascades included; the re-inserts that keep `n` steady are not.
//!
//! Deadlines are uniform over the next 2^20 ticks (17.5 minutes at a 1 ms tick).
//!
//! The heap baseline is a `BinaryHeap<Reverse<(deadline, slot, generation)>>` with **lazy
//! deletion**: values live in a side table indexed by slot with a generation per slot; `remove`
//! bumps the generation and frees the value at once, and the stale heap item is skipped when it
//! reaches the top. When stale items outnumber live ones the heap is compacted with `retain`,
//! inside the timed `remove`, so that cost is amortized into it.
//!
//! Wheel and heap run alternately at each size, so that other work on the machine disturbs both
//! alike. Values are `NonZeroU64`: pointer-sized with a niche, like the executor's `Arc`.
//!
//! Run: `cargo bench --bench wheel -- --measurement-time 2 --warm-up-time 1 --sample-size 20`.

#[cfg(not(wheelpool_loom))]
mod bench {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::hint::black_box;
    use std::num::NonZeroU64;
    use std::time::{Duration, Instant};

    use criterion::{BenchmarkId, Criterion};
    use rand::rngs::StdRng;
    use rand::seq::index::sample;
    use rand::{Rng, SeedableRng};
    use wheelpool::wheel::{Key, Wheel};

    /// Live entries kept by each benchmark.
    const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];
    /// Deadlines are spread uniformly over this many ticks ahead of `now`.
    const HORIZON: u64 = 1 << 20;
    /// Operations per timed batch: large enough that `Instant::now` costs nothing per op.
    const CHUNK: usize = 1024;

    /// The payload: pointer-sized with a niche, like the executor's `Arc<Task>`.
    type Value = NonZeroU64;

    fn value(i: usize) -> Value {
        NonZeroU64::new(i as u64 + 1).expect("non-zero")
    }

    /// What both structures offer to the benchmarks.
    trait Timers {
        type Key: Copy;
        fn insert(&mut self, deadline: u64, value: Value) -> Self::Key;
        /// Removes the entry of `key`, whose value is `value` if it is still live.
        fn remove(&mut self, key: Self::Key, value: Value) -> Option<Value>;
        fn poll(&mut self, now: u64, out: &mut Vec<Value>);
        fn now(&self) -> u64;
    }

    impl Timers for Wheel<Value> {
        type Key = Key;
        fn insert(&mut self, deadline: u64, value: Value) -> Key {
            Wheel::insert(self, deadline, value)
        }
        fn remove(&mut self, key: Key, value: Value) -> Option<Value> {
            // A wheel key is a slab index; the value tells this entry from a later one.
            Wheel::remove(self, key, |v| *v == value)
        }
        fn poll(&mut self, now: u64, out: &mut Vec<Value>) {
            self.poll_expired(now, out);
        }
        fn now(&self) -> u64 {
            Wheel::now(self)
        }
    }

    /// `BinaryHeap` with lazy deletion (see the file docs).
    #[derive(Default)]
    struct Heap {
        heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
        /// Per slot: current generation and value (`None` when the slot is free).
        slots: Vec<(u32, Option<Value>)>,
        free: Vec<u32>,
        /// Heap items whose slot generation moved on.
        stale: usize,
        now: u64,
    }

    impl Heap {
        fn live(&self) -> usize {
            self.heap.len() - self.stale
        }

        /// Vacates `slot`, whose item is current, and returns its value.
        fn vacate(&mut self, slot: u32) -> Option<Value> {
            let entry = &mut self.slots[slot as usize];
            entry.0 = entry.0.wrapping_add(1);
            self.free.push(slot);
            entry.1.take()
        }
    }

    impl Timers for Heap {
        type Key = (u32, u32);
        fn insert(&mut self, deadline: u64, value: Value) -> (u32, u32) {
            let slot = self.free.pop().unwrap_or_else(|| {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            });
            let entry = &mut self.slots[slot as usize];
            entry.1 = Some(value);
            self.heap.push(Reverse((deadline, slot, entry.0)));
            (slot, entry.0)
        }
        fn remove(&mut self, (slot, generation): (u32, u32), _value: Value) -> Option<Value> {
            let entry = self.slots.get(slot as usize)?;
            if entry.0 != generation || entry.1.is_none() {
                return None;
            }
            let value = self.vacate(slot);
            self.stale += 1;
            if self.stale > self.live() && self.heap.len() > CHUNK {
                let slots = &self.slots;
                self.heap
                    .retain(|Reverse((_, s, g))| slots[*s as usize].0 == *g);
                self.stale = 0;
            }
            value
        }
        fn poll(&mut self, now: u64, out: &mut Vec<Value>) {
            self.now = self.now.max(now);
            while let Some(&Reverse((deadline, slot, generation))) = self.heap.peek() {
                if deadline > self.now {
                    break;
                }
                self.heap.pop();
                if self.slots[slot as usize].0 == generation {
                    out.extend(self.vacate(slot));
                } else {
                    self.stale -= 1;
                }
            }
        }
        fn now(&self) -> u64 {
            self.now
        }
    }

    /// Which half of a churn round is timed.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Op {
        Insert,
        Remove,
        CancelRecent,
    }

    /// A structure filled with `n` entries, their keys, and a seeded random source.
    struct Fixture<S: Timers> {
        timers: S,
        keys: Vec<S::Key>,
        rng: StdRng,
    }

    impl<S: Timers + Default> Fixture<S> {
        fn new(n: usize) -> Self {
            let mut rng = StdRng::seed_from_u64(0x5eed);
            let mut timers = S::default();
            let keys = (0..n)
                .map(|i| timers.insert(rng.gen_range(1..HORIZON), value(i)))
                .collect();
            Fixture { timers, keys, rng }
        }

        /// `CHUNK` distinct random positions into `keys`, in random order, and fresh deadlines.
        fn batch(&mut self) -> (Vec<usize>, Vec<u64>) {
            let now = self.timers.now();
            let positions = sample(&mut self.rng, self.keys.len(), CHUNK).into_vec();
            let deadlines = (0..CHUNK)
                .map(|_| now + self.rng.gen_range(1..HORIZON))
                .collect();
            (positions, deadlines)
        }

        /// Removes then re-inserts `CHUNK` random entries; returns the time of the timed part.
        fn churn(&mut self, timed: Op) -> Duration {
            let (positions, deadlines) = self.batch();
            let removed = self.remove_at(&positions);
            let inserted = self.insert_at(&positions, &deadlines);
            match timed {
                Op::Insert => inserted,
                Op::Remove => removed,
                Op::CancelRecent => {
                    // The RPC pattern: timers armed a moment ago are cancelled, oldest first.
                    let cancelled = self.remove_at(&positions);
                    self.insert_at(&positions, &deadlines);
                    cancelled
                }
            }
        }

        /// Removes the entries at `positions`; returns the time it took.
        fn remove_at(&mut self, positions: &[usize]) -> Duration {
            let start = Instant::now();
            for &p in positions {
                black_box(self.timers.remove(self.keys[p], value(p)));
            }
            start.elapsed()
        }

        /// Inserts an entry at each of `positions`; returns the time it took.
        fn insert_at(&mut self, positions: &[usize], deadlines: &[u64]) -> Duration {
            let start = Instant::now();
            for (&p, &deadline) in positions.iter().zip(deadlines) {
                self.keys[p] = self.timers.insert(deadline, value(p));
            }
            start.elapsed()
        }

        /// Time of `iters` ops of `churn`.
        fn churn_iters(&mut self, iters: u64, timed: Op) -> Duration {
            let chunks = iters.div_ceil(CHUNK as u64);
            let total: Duration = (0..chunks).map(|_| self.churn(timed)).sum();
            total.mul_f64(iters as f64 / (chunks * CHUNK as u64) as f64)
        }

        /// Time per entry handed out by polls that each make about `CHUNK` entries due.
        fn poll_iters(&mut self, iters: u64) -> Duration {
            let step = (HORIZON * CHUNK as u64 / self.keys.len() as u64).max(1);
            let mut out = Vec::with_capacity(4 * CHUNK);
            let (mut yielded, mut timed) = (0u64, Duration::ZERO);
            while yielded < iters {
                let target = self.timers.now() + step;
                let start = Instant::now();
                self.timers.poll(target, &mut out);
                timed += start.elapsed();
                yielded += out.len() as u64;
                // Keep `n` live: put back as many as came out, with the keys they displace.
                for v in out.drain(..) {
                    let p = (v.get() - 1) as usize;
                    let deadline = target + self.rng.gen_range(1..HORIZON);
                    self.keys[p] = self.timers.insert(deadline, v);
                }
            }
            timed.mul_f64(iters as f64 / yielded as f64)
        }
    }

    /// Runs one benchmark of `group` on `fixture`.
    fn bench<S: Timers + Default>(
        c: &mut Criterion,
        group: &str,
        name: &str,
        fixture: &mut Fixture<S>,
    ) {
        let n = fixture.keys.len();
        let mut g = c.benchmark_group(group);
        g.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter_custom(|iters| match group {
                "insert" => fixture.churn_iters(iters, Op::Insert),
                "remove" => fixture.churn_iters(iters, Op::Remove),
                "cancel_recent" => fixture.churn_iters(iters, Op::CancelRecent),
                _ => fixture.poll_iters(iters),
            })
        });
    }

    /// The benchmark entry point. Wheel and heap alternate at each size and operation, so that
    /// noise from other work on the machine hits both alike.
    pub(crate) fn all(c: &mut Criterion) {
        for &n in &SIZES {
            let mut wheel = Fixture::<Wheel<Value>>::new(n);
            let mut heap = Fixture::<Heap>::new(n);
            for group in ["insert", "remove", "cancel_recent", "poll"] {
                bench(c, group, "wheel", &mut wheel);
                bench(c, group, "heap", &mut heap);
            }
        }
    }

    criterion::criterion_group!(benches, all);
}

#[cfg(not(wheelpool_loom))]
criterion::criterion_main!(bench::benches);

/// Under `--cfg loom` criterion is not a dependency: nothing to run.
#[cfg(wheelpool_loom)]
fn main() {}
