mod adversary_shutdown;
mod adversary_wake;
mod builder;
mod panics;
mod pool_drop;
mod shutdown;
mod shutdown_now_race;
mod thread_hooks;
