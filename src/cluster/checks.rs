//! What a cluster job's settings may be: the bounds the store can hold, the defaults that
//! scale with the schedule, and the owner tag that tells two chains apart.

use super::ClusterError;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// The shortest period and lease accepted: the pool's default tick.
pub(super) const MIN_STEP: Duration = Duration::from_millis(1);

/// The longest period, offset, lease or misfire grace accepted (100 years): the store counts
/// time in nanoseconds since the epoch in a signed 64-bit integer, which ends in 2262.
pub(super) const MAX_SPAN: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The longest job name and node label accepted (the name is the store's primary key).
const MAX_NAME: usize = 200;

/// The misfire grace when none is set: three periods, at least 1 s, at most Quartz's 60 s.
pub(super) fn default_grace(period: Duration) -> Duration {
    period
        .saturating_mul(3)
        .clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// A random tag that tells apart two chains given the same node label: 128 bits, so that two
/// chains of one job never draw the same one (they would take each other's claims back).
pub(super) fn random_tag() -> String {
    let half = || {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        hasher.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}

/// Checks a lease: 1 ms ..= 100 years, in whole microseconds (the store's unit for it).
pub(super) fn check_lease(lease: Duration) -> Result<(), ClusterError> {
    if !(MIN_STEP..=MAX_SPAN).contains(&lease) || lease.subsec_nanos() % 1_000 != 0 {
        return Err(ClusterError::InvalidJob(format!(
            "at_most_for {lease:?} is not a whole number of microseconds within 1 ms ..= 100 years"
        )));
    }
    Ok(())
}

/// Checks a misfire grace: at most 100 years.
pub(super) fn check_grace(grace: Duration) -> Result<(), ClusterError> {
    if grace > MAX_SPAN {
        return Err(ClusterError::InvalidJob(format!(
            "misfire_grace {grace:?} is over 100 years"
        )));
    }
    Ok(())
}

/// Checks a name or label: 1 to [`MAX_NAME`] bytes, no NUL (the store's text cannot hold one).
pub(super) fn check_name(what: &str, name: &str) -> Result<(), ClusterError> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(ClusterError::InvalidJob(format!(
            "the {what} must be 1 to {MAX_NAME} bytes, got {} bytes",
            name.len()
        )));
    }
    if name.contains('\0') {
        return Err(ClusterError::InvalidJob(format!(
            "the {what} {name:?} holds a NUL byte"
        )));
    }
    Ok(())
}
