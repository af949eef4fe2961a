//! The `tracing` feature (`cargo test --features tracing --test tracing`): the run spans and
//! the events, captured by a small collecting `tracing::Subscriber` written here. Why not
//! `tracing-subscriber`: this is some 100 lines, needs no dev-dependency (every dependency is
//! built by every test build on a 2-core CI), and shows exactly what the pool sends: span
//! fields, event fields and which span an event came from.

#![cfg(feature = "tracing")]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use wheelpool::{ManualClock, MissedTicks, ScheduledThreadPool, TaskError};

/// What one span or event carried.
#[derive(Debug, Clone, Default)]
struct Rec {
    name: String,
    level: String,
    target: String,
    fields: BTreeMap<String, String>,
    /// For an event: the span it was emitted in (its fields).
    parent: Option<Box<Rec>>,
}

impl Rec {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

impl Visit for Rec {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.fields
            .insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields
            .insert(field.name().to_owned(), value.to_owned());
    }
}

/// Every span and event of the process (the pool's threads are not the test's, so the
/// collector is the global default), and each thread's stack of entered spans.
struct Collector {
    spans: Mutex<Vec<Rec>>,
    events: Mutex<Vec<Rec>>,
}

static COLLECTOR: Collector = Collector {
    spans: Mutex::new(Vec::new()),
    events: Mutex::new(Vec::new()),
};

thread_local! {
    static ENTERED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

struct Global;

fn record(meta: &Metadata<'_>) -> Rec {
    Rec {
        name: meta.name().to_owned(),
        level: meta.level().to_string(),
        target: meta.target().to_owned(),
        ..Rec::default()
    }
}

impl Subscriber for Global {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut rec = record(attrs.metadata());
        attrs.record(&mut rec);
        let mut spans = COLLECTOR.spans.lock().unwrap();
        spans.push(rec);
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, id: &Id, values: &Record<'_>) {
        values.record(&mut COLLECTOR.spans.lock().unwrap()[id.into_u64() as usize - 1]);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut rec = record(event.metadata());
        event.record(&mut rec);
        let parent = ENTERED.with(|e| e.borrow().last().copied());
        rec.parent =
            parent.map(|id| Box::new(COLLECTOR.spans.lock().unwrap()[id as usize - 1].clone()));
        COLLECTOR.events.lock().unwrap().push(rec);
    }
    fn enter(&self, id: &Id) {
        ENTERED.with(|e| e.borrow_mut().push(id.into_u64()));
    }
    fn exit(&self, _: &Id) {
        ENTERED.with(|e| e.borrow_mut().pop());
    }
}

/// Installs the collector once, serialises the tests (they share it) and empties it.
fn collecting() -> MutexGuard<'static, ()> {
    static INSTALL: Once = Once::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    INSTALL.call_once(|| tracing::subscriber::set_global_default(Global).unwrap());
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    COLLECTOR.spans.lock().unwrap().clear();
    COLLECTOR.events.lock().unwrap().clear();
    guard
}

fn spans_named(task: &str) -> Vec<Rec> {
    let spans = COLLECTOR.spans.lock().unwrap();
    spans
        .iter()
        .filter(|s| s.field("task.name") == Some(task))
        .cloned()
        .collect()
}

fn events(message: &str) -> Vec<Rec> {
    let events = COLLECTOR.events.lock().unwrap();
    events
        .iter()
        .filter(|e| e.field("message") == Some(message))
        .cloned()
        .collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn manual_pool(clock: &ManualClock) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(1)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn each_run_has_a_span_with_the_task_and_its_lateness() {
    let _c = collecting();
    let clock = ManualClock::new();
    let pool = manual_pool(&clock);
    let c = clock.clone();
    // The only worker is busy from 5 ms to 13 ms: "late", due at 10 ms, starts 3 ms late.
    pool.task()
        .name("blocker")
        .schedule(move || c.advance(ms(8)), ms(5))
        .unwrap()
        .detach();
    let late = pool.task().name("late").schedule(|| (), ms(10)).unwrap();
    let id = format!("{late:?}");
    pool.task().name("now").execute(|| ()).unwrap();
    clock.advance(ms(10));
    assert_eq!(late.join(), Ok(()));

    let blocker = spans_named("blocker");
    assert_eq!(blocker.len(), 1, "one span per run");
    assert_eq!(blocker[0].field("lateness_ns"), Some("0"));
    let late = spans_named("late");
    assert_eq!(late.len(), 1);
    let span = &late[0];
    assert_eq!((span.name.as_str(), span.level.as_str()), ("run", "DEBUG"));
    assert_eq!(span.target, "wheelpool");
    assert_eq!(span.field("task.kind"), Some("OneShot"));
    assert_eq!(span.field("lateness_ns"), Some("3000000"));
    let task_id = span.field("task.id").unwrap();
    assert!(
        id.contains(&format!("id: {task_id},")),
        "{id} has id {task_id}"
    );
    assert_ne!(blocker[0].field("task.id"), Some(task_id));
    let now = spans_named("now");
    assert_eq!(now.len(), 1);
    assert_eq!(
        now[0].field("lateness_ns"),
        None,
        "execute has no planned time"
    );
}

#[test]
fn a_panic_is_an_error_event_in_the_run_span_of_its_task() {
    let _c = collecting();
    let pool = ScheduledThreadPool::builder()
        .threads(1)
        .panic_handler(|_| ())
        .build()
        .unwrap();
    let f = pool
        .task()
        .name("flaky")
        .schedule(|| -> u32 { panic!("disk full") }, ms(1))
        .unwrap();
    assert_eq!(f.join(), Err(TaskError::Panicked("disk full".to_owned())));
    let panics = events("task panicked");
    assert_eq!(panics.len(), 1, "{panics:?}");
    let e = &panics[0];
    assert_eq!(e.level, Level::ERROR.to_string());
    assert_eq!(
        (e.field("task.name"), e.field("panic")),
        (Some("flaky"), Some("disk full"))
    );
    assert_eq!(e.field("task.kind"), Some("OneShot"));
    let parent = e.parent.as_ref().expect("emitted inside the run's span");
    assert_eq!(
        (parent.name.as_str(), parent.field("task.name")),
        ("run", Some("flaky"))
    );
}

#[test]
fn a_late_fixed_rate_task_reports_its_missed_ticks() {
    let _c = collecting();
    let clock = ManualClock::new();
    let pool = manual_pool(&clock);
    let runs = Arc::new(AtomicUsize::new(0));
    let (r, c) = (runs.clone(), clock.clone());
    // Period 10 ms from 10 ms; the first run takes 35 ms: the runs planned at 20, 30 and 40 ms
    // are past when it ends.
    let beat = move || {
        if r.fetch_add(1, SeqCst) == 0 {
            c.advance(ms(35));
        }
    };
    let f = pool.task().name("beat").missed_ticks(MissedTicks::Skip);
    let f = f.schedule_at_fixed_rate(beat, ms(10), ms(10)).unwrap();
    clock.advance(ms(10));
    let missed = events("missed ticks");
    assert_eq!(missed.len(), 1, "{missed:?}");
    let e = &missed[0];
    assert_eq!(e.level, Level::WARN.to_string());
    assert_eq!(e.field("policy"), Some("Skip"));
    assert_eq!(e.field("missed"), Some("3"));
    assert_eq!(e.field("period_ns"), Some("10000000"));
    let parent = e.parent.as_ref().expect("inside the run's span");
    assert_eq!(parent.field("task.name"), Some("beat"));
    assert_eq!(parent.field("task.kind"), Some("FixedRate"));
    assert_eq!(runs.load(SeqCst), 1, "Skip: no burst");
    assert!(f.cancel());
}

#[test]
fn shutdown_shutdown_now_and_each_handed_back_task_are_events() {
    let _c = collecting();
    let pool = ScheduledThreadPool::builder()
        .threads(1)
        .execute_delayed_after_shutdown(false)
        .build()
        .unwrap();
    pool.task()
        .name("nightly")
        .schedule(|| (), Duration::from_secs(3600))
        .unwrap()
        .detach();
    pool.shutdown();
    assert!(pool.await_termination(Duration::from_secs(30)));
    let shutdown = events("shutdown");
    assert_eq!(shutdown.len(), 1);
    assert_eq!(shutdown[0].level, Level::INFO.to_string());
    assert_eq!(shutdown[0].field("execute_delayed"), Some("false"));
    assert_eq!(shutdown[0].field("continue_periodic"), Some("false"));
    assert!(
        events("task handed back").is_empty(),
        "not until it leaves the pool"
    );
    assert_eq!(pool.take_handed_back().len(), 1);
    let handed = events("task handed back");
    assert_eq!(handed.len(), 1);
    assert_eq!(handed[0].field("task.name"), Some("nightly"));
    assert_eq!(handed[0].field("state"), Some("Shutdown"));

    let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    let hour = Duration::from_secs(3600);
    pool.task()
        .name("report")
        .schedule_with_fixed_delay(|| (), hour, hour)
        .unwrap()
        .detach();
    assert_eq!(pool.shutdown_now().len(), 1);
    let now = events("shutdown_now");
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].field("handed_back"), Some("1"));
    let handed = events("task handed back");
    assert_eq!(handed.len(), 2);
    let report = &handed[1];
    assert_eq!(
        (report.field("task.name"), report.field("state")),
        (Some("report"), Some("Cancelled"))
    );
    assert_eq!(report.field("task.kind"), Some("FixedDelay"));
}
