#![cfg(not(wheelpool_loom))]
//! Names and inspection: a task's id, name and kind in `PendingTask`, in the `Debug` of its
//! future and handle (with its state by name), and in the pool's panic handler
//! (`TaskInfo::panicking`).

use crate::manual_common::*;
use std::ops::ControlFlow;
use wheelpool::{PendingTask, TaskInfo, TaskKind};

#[test]
fn pending_tasks_tell_their_name_kind_deadline_and_id() {
    bounded(|| {
        let clock = ManualClock::new();
        let t0 = clock.now();
        let pool = manual_pool(&clock, 1);
        let named = |name: &str| pool.task().name(name);
        let futures = [
            named("once")
                .schedule(|| (), ms(10))
                .unwrap()
                .cancel_handle(),
            named("at")
                .schedule_at(|| (), t0 + ms(20))
                .unwrap()
                .cancel_handle(),
            named("rate")
                .schedule_at_fixed_rate(|| (), ms(30), ms(5))
                .unwrap()
                .cancel_handle(),
            named("delay")
                .schedule_with_fixed_delay(|| (), ms(40), ms(5))
                .unwrap()
                .cancel_handle(),
            named("dyn-delay")
                .schedule_with_dynamic_delay(|| Some(ms(1)), ms(50))
                .unwrap()
                .cancel_handle(),
            named("dyn-rate")
                .schedule_at_dynamic_rate(
                    || -> ControlFlow<(), Duration> { ControlFlow::Break(()) },
                    ms(60),
                )
                .unwrap()
                .cancel_handle(),
            pool.schedule(|| (), Duration::MAX).unwrap().cancel_handle(),
        ];
        let mut pending: Vec<PendingTask> = pool.shutdown_now();
        pending.sort_by_key(|t| t.deadline().map(|d| d - t0).unwrap_or(Duration::MAX));
        let seen: Vec<_> = pending
            .iter()
            .map(|t| (t.name(), t.kind(), t.deadline().map(|d| d - t0)))
            .collect();
        assert_eq!(
            seen,
            [
                (Some("once"), TaskKind::OneShot, Some(ms(10))),
                (Some("at"), TaskKind::OneShot, Some(ms(20))),
                (Some("rate"), TaskKind::FixedRate, Some(ms(30))),
                (Some("delay"), TaskKind::FixedDelay, Some(ms(40))),
                (Some("dyn-delay"), TaskKind::DynamicDelay, Some(ms(50))),
                (Some("dyn-rate"), TaskKind::DynamicRate, Some(ms(60))),
                (None, TaskKind::OneShot, None),
            ]
        );
        // Ids: distinct, and the ones each future's Debug shows.
        let mut ids: Vec<u64> = pending.iter().map(|t| t.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 7);
        for h in &futures {
            let debug = format!("{h:?}");
            assert!(
                pending
                    .iter()
                    .any(|t| debug.contains(&format!("id: {},", t.id()))),
                "{debug}"
            );
            assert!(h.is_cancelled());
        }
        let text = format!("{:?}", pending[2]);
        assert!(
            text.contains(r#"name: Some("rate")"#) && text.contains("kind: FixedRate"),
            "{text}"
        );
    });
}

#[test]
fn a_periodic_task_handed_back_between_runs_tells_its_next_deadline() {
    bounded(|| {
        let clock = ManualClock::new();
        let t0 = clock.now();
        let pool = manual_pool(&clock, 1);
        let f = pool
            .task()
            .name("beat")
            .schedule_at_fixed_rate(|| (), ms(10), ms(10))
            .unwrap();
        clock.advance(ms(25)); // ran at 10 and 20; next at 30
        let pending = pool.shutdown_now();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].deadline(), Some(t0 + ms(30)));
        assert!(pending[0].is_periodic());
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
    });
}

#[test]
fn debug_shows_id_name_kind_and_state_by_name() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let f = pool
            .task()
            .name("sweep")
            .schedule_with_fixed_delay(|| (), ms(10), ms(10))
            .unwrap();
        let h = f.cancel_handle();
        for text in [format!("{f:?}"), format!("{h:?}")] {
            assert!(text.contains(r#"name: Some("sweep")"#), "{text}");
            assert!(text.contains("kind: FixedDelay"), "{text}");
            assert!(text.contains("state: Scheduled"), "{text}");
            assert!(text.contains("id: "), "{text}");
            assert!(
                !text.contains("State(") && !text.contains("deadline"),
                "{text}"
            );
        }
        assert!(f.cancel());
        assert!(format!("{h:?}").contains("state: Cancelled"), "{h:?}");

        let done = pool.schedule(|| 1, Duration::ZERO).unwrap();
        clock.advance(Duration::ZERO);
        let h = done.cancel_handle();
        assert_eq!(join_within(done), Ok(1));
        let text = format!("{h:?}");
        assert!(
            text.contains("name: None") && text.contains("state: Completed"),
            "{text}"
        );
        assert!(text.contains("kind: OneShot"), "{text}");
    });
}

/// What the panic handler saw: name, kind, id, message.
type Seen = (Option<String>, TaskKind, u64, String);

#[test]
fn the_panic_handler_learns_which_task_panicked() {
    bounded(|| {
        let clock = ManualClock::new();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let s = seen.clone();
        let pool = ScheduledThreadPool::builder()
            .threads(2)
            .clock(clock.clone())
            .panic_handler(move |payload| {
                let task = TaskInfo::panicking().expect("the handler runs for a task's run");
                let msg = payload.downcast_ref::<&str>().copied().unwrap_or("?");
                s.lock().unwrap().push((
                    task.name().map(str::to_owned),
                    task.kind(),
                    task.id(),
                    msg.to_owned(),
                ));
            })
            .build()
            .unwrap();
        let one = pool
            .task()
            .name("import")
            .schedule(|| -> u8 { panic!("bad row") }, ms(1))
            .unwrap();
        let beat = pool
            .task()
            .name("heartbeat")
            .survive_panics(true)
            .schedule_at_fixed_rate(|| panic!("no peer"), ms(2), ms(10))
            .unwrap();
        let anonymous = pool.schedule(|| -> u8 { panic!("who") }, ms(3)).unwrap();
        let ids = [&one, &anonymous].map(|f| format!("{f:?}"));
        clock.advance(ms(3));
        assert!(TaskInfo::panicking().is_none(), "only inside the handler");
        let mut got = seen.lock().unwrap().clone();
        got.sort_by(|a, b| a.3.cmp(&b.3));
        let summary: Vec<_> = got
            .iter()
            .map(|(n, k, _, m)| (n.as_deref(), *k, m.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                (Some("import"), TaskKind::OneShot, "bad row"),
                (Some("heartbeat"), TaskKind::FixedRate, "no peer"),
                (None, TaskKind::OneShot, "who"),
            ]
        );
        assert!(ids[0].contains(&format!("id: {},", got[0].2)), "{}", ids[0]);
        assert!(ids[1].contains(&format!("id: {},", got[2].2)), "{}", ids[1]);
        clock.advance(ms(10));
        assert_eq!(
            seen.lock().unwrap().len(),
            4,
            "the heartbeat panicked again, named"
        );
        assert_eq!(seen.lock().unwrap()[3].0.as_deref(), Some("heartbeat"));
        assert!(beat.cancel());
        assert_eq!(join_within(one), Err(TaskError::Panicked("bad row".into())));
        assert_eq!(
            join_within(anonymous),
            Err(TaskError::Panicked("who".into()))
        );
    });
}

#[test]
fn execute_and_handles_take_names_too() {
    bounded(|| {
        let clock = ManualClock::new();
        let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let s = seen.clone();
        let pool = ScheduledThreadPool::builder()
            .threads(1)
            .clock(clock.clone())
            .panic_handler(move |_| {
                let task = TaskInfo::panicking().unwrap();
                s.lock().unwrap().push(task.name().map(str::to_owned));
            })
            .build()
            .unwrap();
        let handle = pool.handle();
        handle.task().name("fire").execute(|| panic!("x")).unwrap();
        let waiting = handle.task().name("later").schedule(|| (), ms(50)).unwrap();
        clock.advance(Duration::ZERO);
        assert!(common_wait(|| seen.lock().unwrap().len() == 1));
        assert_eq!(seen.lock().unwrap()[0].as_deref(), Some("fire"));
        let pending = pool.shutdown_now();
        assert_eq!(pending[0].name(), Some("later"));
        assert!(waiting.is_cancelled());
    });
}

/// Waits (bounded) for `cond`.
fn common_wait(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + JOIN_LIMIT;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        thread::yield_now();
    }
    cond()
}
