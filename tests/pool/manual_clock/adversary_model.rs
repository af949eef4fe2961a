//! A randomized model check on a ManualClock: one thread makes random calls (schedule one-shots
//! and fixed-rate / fixed-delay tasks, cancel, reset, advance by uneven amounts) against a real
//! pool with four workers, and a plain model predicts every answer and every run time exactly.
//! After each advance the pool must agree with the model: which one-shots have run, the time
//! each saw, every periodic run time, and what each cancel and reset returned.
//!
//! `ADVERSARY_SEED=<u64>` replays one sequence; the seeds in use are printed.

#![cfg(not(wheelpool_loom))]

use crate::manual_common::*;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One task as the model sees it; times are whole milliseconds after t0.
enum Plan {
    OneShot {
        due: u64,
        done: bool,
        cancelled: bool,
    },
    /// Fixed rate: runs at `next`, `next + period`, ...; fixed delay: the same in virtual time
    /// (a run takes no virtual time), so one model serves both.
    Periodic {
        next: u64,
        period: u64,
        runs: Vec<u64>,
        cancelled: bool,
    },
}

struct Real {
    future: ScheduledFuture<()>,
    seen: Arc<Mutex<Vec<u64>>>,
}

fn run_model(seed: u64, steps: usize) {
    let clock = ManualClock::new();
    let t0 = clock.now();
    let pool = manual_pool(&clock, 4);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut now = 0u64; // ms
    let mut model: Vec<Plan> = Vec::new();
    let mut real: Vec<Real> = Vec::new();
    let record = move |seen: &Arc<Mutex<Vec<u64>>>, c: &ManualClock| {
        let at = c.now() - t0;
        assert_eq!(
            at.subsec_nanos() % 1_000_000,
            0,
            "a run off the ms grid: {at:?}"
        );
        seen.lock().unwrap().push(at.as_millis() as u64);
    };
    for step in 0..steps {
        let at_now = now;
        let ctx = move || format!("seed {seed}, step {step}, now {at_now} ms");
        match rng.gen_range(0..100) {
            0..=39 => {
                let delay = rng.gen_range(1..200u64);
                let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
                let (s, c) = (seen.clone(), clock.clone());
                let future = pool.schedule(move || record(&s, &c), ms(delay)).unwrap();
                model.push(Plan::OneShot {
                    due: now + delay,
                    done: false,
                    cancelled: false,
                });
                real.push(Real { future, seen });
            }
            40..=44 => {
                let initial = rng.gen_range(1..50u64);
                let period = rng.gen_range(3..30u64);
                let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
                let (s, c) = (seen.clone(), clock.clone());
                let task = move || record(&s, &c);
                let future = if rng.gen_bool(0.5) {
                    pool.schedule_at_fixed_rate(task, ms(initial), ms(period))
                } else {
                    pool.schedule_with_fixed_delay(task, ms(initial), ms(period))
                }
                .unwrap();
                model.push(Plan::Periodic {
                    next: now + initial,
                    period,
                    runs: Vec::new(),
                    cancelled: false,
                });
                real.push(Real { future, seen });
            }
            45..=59 if !model.is_empty() => {
                let i = rng.gen_range(0..model.len());
                let expect = match &mut model[i] {
                    Plan::OneShot {
                        done, cancelled, ..
                    } => {
                        let ok = !*done && !*cancelled;
                        *cancelled |= ok;
                        ok
                    }
                    Plan::Periodic { cancelled, .. } => {
                        let ok = !*cancelled;
                        *cancelled = true;
                        ok
                    }
                };
                assert_eq!(real[i].future.cancel(), expect, "cancel {i}, {}", ctx());
            }
            60..=79 if !model.is_empty() => {
                let i = rng.gen_range(0..model.len());
                let delay = rng.gen_range(1..100u64);
                let expect = match &mut model[i] {
                    Plan::OneShot {
                        due,
                        done,
                        cancelled,
                    } => {
                        let ok = !*done && !*cancelled;
                        if ok {
                            *due = now + delay;
                        }
                        ok
                    }
                    Plan::Periodic {
                        next, cancelled, ..
                    } => {
                        if !*cancelled {
                            *next = now + delay;
                        }
                        !*cancelled
                    }
                };
                assert_eq!(
                    real[i].future.reset(ms(delay)),
                    expect,
                    "reset {i}, {}",
                    ctx()
                );
            }
            _ => {
                let by = match rng.gen_range(0..4) {
                    0 => 0,
                    1 => rng.gen_range(1..5),
                    _ => rng.gen_range(5..80),
                };
                clock.advance(ms(by));
                now += by;
                for plan in model.iter_mut() {
                    match plan {
                        Plan::OneShot {
                            due,
                            done,
                            cancelled,
                        } => {
                            if !*cancelled && *due <= now {
                                *done = true;
                            }
                        }
                        Plan::Periodic {
                            next,
                            period,
                            runs,
                            cancelled,
                        } => {
                            while !*cancelled && *next <= now {
                                runs.push(*next);
                                *next += *period;
                            }
                        }
                    }
                }
                check(
                    &model,
                    &real,
                    &format!("seed {seed}, step {step}, now {now} ms"),
                );
            }
        }
    }
    for r in &real {
        r.future.cancel();
    }
}

fn check(model: &[Plan], real: &[Real], ctx: &str) {
    for (i, (plan, r)) in model.iter().zip(real).enumerate() {
        let seen = r.seen.lock().unwrap().clone();
        match plan {
            Plan::OneShot { due, done, .. } => {
                let want: Vec<u64> = if *done { vec![*due] } else { vec![] };
                assert_eq!(seen, want, "one-shot {i}, {ctx}");
                assert_eq!(r.future.is_done(), *done || r.future.is_cancelled());
            }
            Plan::Periodic { runs, .. } => {
                assert_eq!(&seen, runs, "periodic {i}, {ctx}");
            }
        }
    }
}

#[test]
fn random_calls_on_a_manual_clock_match_the_model_exactly() {
    let base = std::env::var("ADVERSARY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    bounded(move || {
        for k in 0..10 {
            let seed = base.wrapping_add(k);
            eprintln!("model seed {seed}");
            run_model(seed, 500);
        }
    });
}
