//! The `postgres` feature's tests, against real PostgreSQL 15 servers that each test starts (see
//! `pg_common`): exactly once across nodes, failover, the rule's edge cases, injected faults
//! (frozen backends, terminated connections, a frozen server, row locks), and adversarial use.

#[path = "../pg_common/mod.rs"]
mod pg_common;

mod adversary;
#[cfg(feature = "cron")]
mod cron;
mod failover;
mod faults;
mod once;
mod rules;
