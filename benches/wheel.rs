//! Micro-benchmarks of the timing wheel against `std::collections::BinaryHeap`.
//!
//! Each benchmark keeps `n` entries live (1e4, 1e5, 1e6) and reports time per operation:
//! - `insert`: insert into a full structure whose free nodes were left by random removals (the
//!   steady state of a timer service), timed; the removals that make room are not.
//! - `remove`: remove random live keys (cancellation), timed; the re-inserts are not.
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
//! Run: `cargo bench --bench wheel -- --measurement-time 2 --warm-up-time 1 --sample-size 20`.

#[cfg(not(loom))]
mod bench {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::hint::black_box;
    use std::num::NonZeroU64;
    use std::time::{Duration, Instant};

    use criterion::{BenchmarkId, Criterion};
    use rand::rngs::StdRng;
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
        fn remove(&mut self, key: Self::Key) -> Option<Value>;
        fn poll(&mut self, now: u64, out: &mut Vec<Value>);
        fn now(&self) -> u64;
    }

    impl Timers for Wheel<Value> {
        type Key = Key;
        fn insert(&mut self, deadline: u64, value: Value) -> Key {
            Wheel::insert(self, deadline, value)
        }
        fn remove(&mut self, key: Key) -> Option<Value> {
            Wheel::remove(self, key)
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
        fn remove(&mut self, (slot, generation): (u32, u32)) -> Option<Value> {
            let entry = self.slots.get(slot as usize)?;
            if entry.0 != generation || entry.1.is_none() {
                return None;
            }
            let value = self.vacate(slot);
            self.stale += 1;
            if self.stale > self.live() && self.heap.len() > CHUNK {
                let slots = &self.slots;
                self.heap.retain(|Reverse((_, s, g))| slots[*s as usize].0 == *g);
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
            let keys = (0..n).map(|i| timers.insert(rng.gen_range(1..HORIZON), value(i))).collect();
            Fixture { timers, keys, rng }
        }

        /// `CHUNK` random positions into `keys` (repeats allowed), and fresh deadlines.
        fn batch(&mut self) -> (Vec<usize>, Vec<u64>) {
            let now = self.timers.now();
            let n = self.keys.len();
            let positions = (0..CHUNK).map(|_| self.rng.gen_range(0..n)).collect();
            let deadlines = (0..CHUNK).map(|_| now + self.rng.gen_range(1..HORIZON)).collect();
            (positions, deadlines)
        }

        /// Removes then re-inserts the entries at `positions`, timing one of the two halves.
        fn churn(&mut self, time_inserts: bool) -> Duration {
            let (mut positions, deadlines) = self.batch();
            positions.sort_unstable();
            positions.dedup();
            let start = Instant::now();
            for &p in &positions {
                black_box(self.timers.remove(self.keys[p]));
            }
            let removed = start.elapsed();
            let start = Instant::now();
            for (&p, &deadline) in positions.iter().zip(&deadlines) {
                self.keys[p] = self.timers.insert(deadline, value(p));
            }
            let inserted = start.elapsed();
            // Report per requested op: scale by the ops actually timed.
            let timed = if time_inserts { inserted } else { removed };
            timed.mul_f64(CHUNK as f64 / positions.len() as f64)
        }

        /// Time per op over `iters` ops of `churn`.
        fn churn_iters(&mut self, iters: u64, time_inserts: bool) -> Duration {
            let chunks = iters.div_ceil(CHUNK as u64);
            let total: Duration = (0..chunks).map(|_| self.churn(time_inserts)).sum();
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

    fn run<S: Timers + Default>(c: &mut Criterion, name: &str) {
        for &n in &SIZES {
            let mut fixture = Fixture::<S>::new(n);
            c.benchmark_group("insert").bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_custom(|iters| fixture.churn_iters(iters, true))
            });
            c.benchmark_group("remove").bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_custom(|iters| fixture.churn_iters(iters, false))
            });
            c.benchmark_group("poll").bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter_custom(|iters| fixture.poll_iters(iters))
            });
        }
    }

    /// The benchmark entry point: wheel then heap at each size.
    pub(crate) fn all(c: &mut Criterion) {
        run::<Wheel<Value>>(c, "wheel");
        run::<Heap>(c, "heap");
    }

    criterion::criterion_group!(benches, all);
}

#[cfg(not(loom))]
criterion::criterion_main!(bench::benches);

/// Under `--cfg loom` criterion is not a dependency: nothing to run.
#[cfg(loom)]
fn main() {}
