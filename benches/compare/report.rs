//! The JSON lines the children print, their medians, and the markdown tables the parent prints.
//!
//! A line is one flat JSON object: `{"impl":"tokio","workload":"W1","n":10000,...figures}` with
//! string or number values only (W7 adds `"threads":T` after `n`: its rows are per T). The parser reads exactly what [`Record::to_json`] writes (no
//! escapes, no nesting): it is not a general JSON parser and need not be.

use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The implementation compared against the peers: the left column and the numerator of ratios.
pub(crate) const SUBJECT: &str = "wheelpool";

/// The peers, in column order. The last one, tokio-util's `DelayQueue`, runs W1 and W2 only:
/// its other cells say "-".
pub(crate) const PEERS: [&str; 3] = ["scheduled-thread-pool", "tokio", "delayqueue"];

/// The figure the parent adds to each child's line: the share of the machine's CPU capacity that
/// other processes used while the child ran, in percent.
pub(crate) const NOISE: &str = "other_cpu_pct";

/// Figures left out of the tables: inputs and measurement conditions, not results.
const NOT_RESULTS: [&str; 3] = ["pending", "ideal", NOISE];

/// One child's report (or the median of several).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Record {
    pub(crate) impl_name: String,
    pub(crate) workload: String,
    pub(crate) n: u64,
    /// The timer tick the child was asked for, if any.
    pub(crate) tick_us: Option<u64>,
    /// W7's producer threads, if any.
    pub(crate) threads: Option<u64>,
    pub(crate) figures: Vec<(String, f64)>,
}

impl Record {
    /// The column this record goes to: the implementation, with its tick if one was set.
    pub(crate) fn label(&self) -> String {
        match self.tick_us {
            Some(us) => format!("{} (tick {us} us)", self.impl_name),
            None => self.impl_name.clone(),
        }
    }

    /// The row this record goes to: the workload, with its producer count if one was set.
    pub(crate) fn row(&self) -> String {
        match self.threads {
            Some(t) => format!("{} T={t}", self.workload),
            None => self.workload.clone(),
        }
    }

    /// One JSON line (no newline).
    pub(crate) fn to_json(&self) -> String {
        let mut out = format!(
            r#"{{"impl":"{}","workload":"{}","n":{}"#,
            self.impl_name, self.workload, self.n
        );
        if let Some(threads) = self.threads {
            let _ = write!(out, r#","threads":{threads}"#);
        }
        if let Some(us) = self.tick_us {
            let _ = write!(out, r#","tick_us":{us}"#);
        }
        for (name, value) in &self.figures {
            let _ = write!(out, r#","{name}":{}"#, json_number(*value));
        }
        out.push('}');
        out
    }

    /// Reads a line written by [`Record::to_json`]; `None` if it is not one.
    pub(crate) fn parse(line: &str) -> Option<Record> {
        let body = line.trim().strip_prefix('{')?.strip_suffix('}')?;
        let mut record = Record {
            impl_name: String::new(),
            workload: String::new(),
            n: 0,
            tick_us: None,
            threads: None,
            figures: Vec::new(),
        };
        for pair in body.split(',') {
            let (key, value) = pair.split_once(':')?;
            let key = key.trim().trim_matches('"');
            let value = value.trim();
            match key {
                "impl" => record.impl_name = value.trim_matches('"').to_string(),
                "workload" => record.workload = value.trim_matches('"').to_string(),
                "n" => record.n = value.parse().ok()?,
                "tick_us" => record.tick_us = Some(value.parse().ok()?),
                "threads" => record.threads = Some(value.parse().ok()?),
                _ => {
                    let number = match value {
                        "null" => f64::NAN,
                        _ => value.parse().ok()?,
                    };
                    record.figures.push((key.to_string(), number));
                }
            }
        }
        (!record.impl_name.is_empty() && !record.workload.is_empty()).then_some(record)
    }

    /// Removes figure `name` and returns its value.
    pub(crate) fn take_figure(&mut self, name: &str) -> Option<f64> {
        let at = self.figures.iter().position(|(n, _)| n == name)?;
        Some(self.figures.remove(at).1)
    }

    /// The value of figure `name`.
    pub(crate) fn figure(&self, name: &str) -> Option<f64> {
        self.figures
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}

/// Per (label, row, n): the median of each figure over the runs, in first-seen order.
pub(crate) fn medians(records: &[Record]) -> Vec<Record> {
    let mut groups: Vec<(Record, Vec<&Record>)> = Vec::new();
    for record in records {
        let same = |(first, _): &&mut (Record, Vec<&Record>)| {
            first.label() == record.label() && first.row() == record.row() && first.n == record.n
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some((_, members)) => members.push(record),
            None => groups.push((record.clone(), vec![record])),
        }
    }
    groups
        .into_iter()
        .map(|(first, members)| {
            let figures = first
                .figures
                .iter()
                .map(|(name, _)| {
                    let values: Vec<f64> = members.iter().filter_map(|r| r.figure(name)).collect();
                    (name.clone(), median(values))
                })
                .collect();
            Record { figures, ..first }
        })
        .collect()
}

/// The median (mean of the middle two for an even count); NaN for none.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let len = values.len();
    match len {
        0 => f64::NAN,
        _ if len % 2 == 1 => values[len / 2],
        _ => (values[len / 2 - 1] + values[len / 2]) / 2.0,
    }
}

/// The main table: one row per (workload and W7's T, n, figure), a column per implementation, and the
/// wheelpool/peer ratio of each figure. `subject_ready` false: wheelpool's cells say "pending".
pub(crate) fn main_table(medians: &[Record], subject_ready: bool) -> String {
    let mut out = String::new();
    let peers = PEERS.join(" | ");
    let ratios = PEERS.map(|p| format!("{SUBJECT} / {p}")).join(" | ");
    let _ = writeln!(
        out,
        "| workload | n | figure | better | {SUBJECT} | {peers} | {ratios} |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---|---|---:|{}",
        "---:|".repeat(2 * PEERS.len())
    );
    let by_label = |label: &str, row: &str, n: u64| {
        medians
            .iter()
            .find(|r| r.label() == label && r.row() == row && r.n == n)
    };
    for (workload, n) in rows_order(medians) {
        let Some(first) = medians
            .iter()
            .find(|r| r.row() == workload && r.n == n && r.tick_us.is_none())
        else {
            continue;
        };
        for (figure, _) in &first.figures {
            if NOT_RESULTS.contains(&figure.as_str()) {
                continue;
            }
            let subject = by_label(SUBJECT, &workload, n).and_then(|r| r.figure(figure));
            let subject_cell = match (subject, subject_ready) {
                (Some(v), _) => fmt_value(v),
                (None, false) => "pending".to_string(),
                (None, true) => "-".to_string(),
            };
            let mut cells = vec![subject_cell];
            let peer_values: Vec<Option<f64>> = PEERS
                .iter()
                .map(|p| by_label(p, &workload, n).and_then(|r| r.figure(figure)))
                .collect();
            cells.extend(peer_values.iter().map(|v| v.map_or("-".into(), fmt_value)));
            cells.extend(
                peer_values
                    .iter()
                    .map(|peer| ratio_cell(subject, *peer, subject_ready)),
            );
            let _ = writeln!(
                out,
                "| {workload} | {n} | {figure} | {} | {} |",
                better(figure),
                cells.join(" | ")
            );
        }
    }
    out
}

/// The W3 tick table: wheelpool at its default tick and at every other tick it ran with, next to
/// scheduled-thread-pool (which has no tick: it waits on a condvar until each deadline).
pub(crate) fn tick_table(medians: &[Record], subject_ready: bool) -> Option<String> {
    let ticked: Vec<&Record> = medians
        .iter()
        .filter(|r| r.impl_name == SUBJECT && r.workload == "W3" && r.tick_us.is_some())
        .collect();
    let peer = PEERS[0];
    let stp = medians
        .iter()
        .find(|r| r.label() == peer && r.workload == "W3")?;
    let default = medians
        .iter()
        .find(|r| r.label() == SUBJECT && r.workload == "W3");
    let mut columns: Vec<(String, Option<&Record>)> =
        vec![(format!("{SUBJECT} (default tick)"), default)];
    if ticked.is_empty() {
        columns.push((format!("{SUBJECT} (tick 100 us)"), None));
    }
    columns.extend(ticked.iter().map(|r| (r.label(), Some(*r))));
    let last = columns.last().map(|(label, r)| (label.clone(), *r))?;

    let mut out = String::new();
    let heads: Vec<&str> = columns.iter().map(|(label, _)| label.as_str()).collect();
    let _ = writeln!(
        out,
        "| W3 figure (n = {}) | {} | {peer} | {} / {peer} |",
        stp.n,
        heads.join(" | "),
        last.0
    );
    let _ = writeln!(out, "|---|{}---:|---:|", "---:|".repeat(columns.len()));
    for (figure, peer_value) in &stp.figures {
        if NOT_RESULTS.contains(&figure.as_str()) {
            continue;
        }
        let mut cells: Vec<String> = columns
            .iter()
            .map(
                |(_, r)| match (r.and_then(|r| r.figure(figure)), subject_ready) {
                    (Some(v), _) => fmt_value(v),
                    (None, false) => "pending".into(),
                    (None, true) => "-".into(),
                },
            )
            .collect();
        cells.push(fmt_value(*peer_value));
        let subject = last.1.and_then(|r| r.figure(figure));
        cells.push(ratio_cell(subject, Some(*peer_value), subject_ready));
        let _ = writeln!(out, "| {figure} | {} |", cells.join(" | "));
    }
    Some(out)
}

/// How quiet the machine was: other processes' share of the CPU over the kept runs, and which
/// kept runs were above `max_noise` percent (their figures deserve less trust).
pub(crate) fn noise_note(records: &[Record], max_noise: f64) -> String {
    let shares: Vec<f64> = records.iter().filter_map(|r| r.figure(NOISE)).collect();
    let max = shares.iter().copied().fold(0.0, f64::max);
    let mut out = format!(
        "Other processes took {:.1}% of the machine's CPU during the median kept run ({:.1}% at most, {} runs).",
        median(shares.clone()),
        max,
        shares.len()
    );
    let noisy: Vec<String> = records
        .iter()
        .filter(|r| r.figure(NOISE).is_some_and(|share| share > max_noise))
        .map(|r| {
            format!(
                "{} {} n={} ({:.0}%)",
                r.label(),
                r.row(),
                r.n,
                r.figure(NOISE).unwrap_or(0.0)
            )
        })
        .collect();
    if !noisy.is_empty() {
        let _ = write!(
            out,
            " Kept runs above {max_noise}% despite retries: {}.",
            noisy.join(", ")
        );
    }
    out
}

/// (row, n) pairs, sorted (W7's rows by T: "W7 T=1" < "W7 T=2" < .. < "W7 T=8").
fn rows_order(medians: &[Record]) -> BTreeSet<(String, u64)> {
    medians.iter().map(|r| (r.row(), r.n)).collect()
}

fn ratio_cell(subject: Option<f64>, peer: Option<f64>, subject_ready: bool) -> String {
    match (subject, peer) {
        (Some(s), Some(p)) if p != 0.0 => format!("{:.2}", s / p),
        (Some(0.0), Some(_)) => "= (both 0)".into(),
        (Some(_), Some(_)) => "n/a (peer 0)".into(),
        (None, Some(_)) if !subject_ready => "pending".into(),
        _ => "-".into(),
    }
}

/// Which way is good for a figure, read off its name.
fn better(figure: &str) -> &'static str {
    const HIGHER: [&str; 6] = [
        "ops_per_s",
        "tasks_per_s",
        "executions",
        "ratio",
        "fired",
        "drain_per_s",
    ];
    const NEUTRAL: [&str; 1] = ["handle_bytes"];
    if NEUTRAL.iter().any(|h| figure.starts_with(h)) {
        "-"
    } else if HIGHER.iter().any(|h| figure.starts_with(h)) {
        "higher"
    } else {
        "lower"
    }
}

/// A table cell: integers as such, other values to 3 significant-ish digits.
fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "-".into()
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A JSON number: integers without a fraction, others with 3 decimals.
fn json_number(v: f64) -> String {
    if !v.is_finite() {
        "null".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}
