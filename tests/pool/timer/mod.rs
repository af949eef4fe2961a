mod adversary_watch_exact;
mod soak;
mod stress;
