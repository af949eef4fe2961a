//! What the cluster examples share.

use crate::pg_common::PgServer;
use std::time::{SystemTime, UNIX_EPOCH};

/// The database to use: `DATABASE_URL`, or a throwaway PostgreSQL server started here (kept
/// running while the returned server lives, removed when it is dropped).
pub(crate) fn database() -> (Option<PgServer>, String) {
    match std::env::var("DATABASE_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = PgServer::start();
            let url = server.url();
            println!("started a throwaway PostgreSQL server: {url}");
            (Some(server), url)
        }
    }
}

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
