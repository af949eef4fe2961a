//! What the cluster examples share.

use std::time::{SystemTime, UNIX_EPOCH};

/// `hh:mm:ss.mmm` UTC.
pub(crate) fn clock(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let s = d.as_secs();
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60,
        d.subsec_millis()
    )
}
