mod adversary_watch_exact;
mod soak;
mod stress;
mod watcher_helpers;
