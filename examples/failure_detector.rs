//! A heartbeat failure detector: each peer has one timeout task, and every heartbeat received
//! from that peer pushes its timeout back with `reset` (O(1), no new task per heartbeat). A
//! peer that falls silent for longer than the timeout is declared dead, exactly once.
//!
//! Five peers send heartbeats at random intervals; peer 3 falls silent after 400 ms, the others
//! leave cleanly at 1.2 s (their last act cancels their timeout). The example checks that only
//! peer 3 is declared dead, once, and never before its timeout (its last accepted heartbeat plus
//! the timeout). Like any failure detector on real time, it assumes a live peer's heartbeat
//! thread is never held back for a whole timeout (250 ms beyond its largest gap); nothing else
//! about timing.
//!
//! Run: `cargo run --example failure_detector`

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::{CancelHandle, ScheduledFuture, ScheduledThreadPool, TaskError};

const PEERS: usize = 5;
const SILENT_PEER: usize = 3;
/// A peer is dead after this long without a heartbeat.
const TIMEOUT: Duration = Duration::from_millis(300);
/// Heartbeats come every 10 to 50 ms: far inside the timeout, even on a busy machine.
const MIN_GAP_MS: u64 = 10;
const MAX_GAP_MS: u64 = 50;
/// How long the live peers keep beating.
const RUN_FOR: Duration = Duration::from_millis(1200);
/// When the silent peer stops.
const FALLS_SILENT_AT: Duration = Duration::from_millis(400);

/// What the detector knows of one peer.
#[derive(Debug)]
struct Peer {
    /// The last heartbeat the detector accepted (it reset the timeout).
    last_beat: Instant,
    beats: u32,
}

/// Deaths declared: (peer, time since its last accepted heartbeat).
type Deaths = Arc<Mutex<Vec<(usize, Duration)>>>;

/// Arms the timeout of peer `id`: when it fires, the peer is declared dead.
fn arm_timeout(
    pool: &ScheduledThreadPool,
    id: usize,
    peer: Arc<Mutex<Peer>>,
    deaths: Deaths,
) -> ScheduledFuture<()> {
    pool.schedule(
        move || {
            let peer = peer.lock().unwrap();
            let silent_for = peer.last_beat.elapsed();
            println!(
                "peer {id} declared DEAD after {} ms of silence ({} heartbeats seen)",
                silent_for.as_millis(),
                peer.beats
            );
            deaths.lock().unwrap().push((id, silent_for));
        },
        TIMEOUT,
    )
    .expect("pool is running")
}

/// The detector's side of a heartbeat: push the peer's timeout back. False if the peer was
/// already declared dead (its timeout ran): the heartbeat came too late.
fn on_heartbeat(peer: &Mutex<Peer>, timeout: &CancelHandle) -> bool {
    let mut p = peer.lock().unwrap();
    let now = Instant::now();
    if timeout.reset(TIMEOUT) {
        p.last_beat = now;
        p.beats += 1;
        true
    } else {
        false
    }
}

/// A peer's heartbeat sender: random gaps, until `stop_after`. A peer that `leaves` cancels its
/// timeout right after its last heartbeat (a clean goodbye); one that does not just falls
/// silent.
fn beat(
    id: usize,
    peer: Arc<Mutex<Peer>>,
    timeout: CancelHandle,
    stop_after: Duration,
    leaves: bool,
) {
    let start = Instant::now();
    let mut seed = 0x2545_F491_4F6C_DD1D_u64 ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9);
    while start.elapsed() < stop_after {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let gap = MIN_GAP_MS + seed % (MAX_GAP_MS - MIN_GAP_MS + 1);
        thread::sleep(Duration::from_millis(gap)); // the network, not the pool
        assert!(
            on_heartbeat(&peer, &timeout),
            "peer {id}: a live peer was declared dead"
        );
    }
    if leaves {
        assert!(timeout.cancel(), "peer {id}: declared dead as it left");
    }
}

fn main() {
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .build()
        .expect("pool");
    let deaths: Deaths = Arc::default();
    let start = Instant::now();

    let mut senders = Vec::new();
    let mut timeouts = Vec::new();
    for id in 0..PEERS {
        let peer = Arc::new(Mutex::new(Peer {
            last_beat: Instant::now(),
            beats: 0,
        }));
        let timeout = arm_timeout(&pool, id, peer.clone(), deaths.clone());
        let handle = timeout.cancel_handle();
        let (stop_after, leaves) = if id == SILENT_PEER {
            (FALLS_SILENT_AT, false)
        } else {
            (RUN_FOR, true)
        };
        senders.push(thread::spawn(move || {
            beat(id, peer, handle, stop_after, leaves)
        }));
        timeouts.push(timeout);
    }
    for s in senders {
        s.join().expect("a heartbeat sender failed");
    }
    println!(
        "heartbeats stopped after {} ms",
        start.elapsed().as_millis()
    );
    // The silent peer's timeout fires 300 ms after its last heartbeat (about 700 ms in): long
    // before now on an idle machine, but a busy one may still be getting to it. Wait for it;
    // the live peers cancelled theirs as they left.
    let mut timeouts: Vec<Option<ScheduledFuture<()>>> = timeouts.into_iter().map(Some).collect();
    let silent = timeouts[SILENT_PEER]
        .take()
        .expect("the silent peer's timeout");
    assert_eq!(silent.join(), Ok(()), "the silent peer's timeout fired");

    let deaths = deaths.lock().unwrap().clone();
    assert_eq!(
        deaths.len(),
        1,
        "exactly one peer declared dead: {deaths:?}"
    );
    let (dead, silent_for) = deaths[0];
    assert_eq!(dead, SILENT_PEER);
    assert!(
        silent_for >= TIMEOUT,
        "declared dead before its timeout: {silent_for:?}"
    );

    // The live peers left cleanly: their timeouts were cancelled, never fired.
    for (id, timeout) in timeouts.into_iter().enumerate() {
        if let Some(timeout) = timeout {
            assert_eq!(timeout.join(), Err(TaskError::Cancelled), "peer {id}");
        }
    }
    println!(
        "ok: only peer {SILENT_PEER} was declared dead, once, {} ms after its last heartbeat \
         (timeout {} ms)",
        silent_for.as_millis(),
        TIMEOUT.as_millis()
    );
    pool.shutdown();
    assert!(pool.await_termination(Duration::from_secs(5)));
}
