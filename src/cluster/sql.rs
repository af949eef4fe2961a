//! The store's SQL: one table, one row per job, every time from the server's clock in
//! nanoseconds since the Unix epoch (`bigint`: good until the year 2262).
//!
//! The rule these statements implement is in the [module docs](super); the columns:
//! - `period_ns`, `offset_ns`: the job's grid; run `k` is planned at `offset_ns + k * period_ns`.
//! - `cron`: empty for a periodic job; for a cron job its expression and zone (see
//!   `calendar.rs`), whose grid is then 1 ns and 0: run `k` is the occurrence at the instant
//!   `k` ns after the epoch. A node runs the job only if all three equal its own settings.
//! - `last_run`: the highest run number claimed (or given up: skipped as too old or paused).
//!   Only ever grows, except through a takeover, which re-counts it on the new grid so that no
//!   planned time comes twice.
//! - `claim_id`: counts claims; the current lease is (`claim_id`, `locked_by`). A node knows
//!   the last claim it ran, so a claim the database made for it but whose answer was lost is
//!   handed back to it once (and never to anybody else).
//! - `locked_by`, `node`, `locked_at`, `locked_until`: the last claim's owner token, node
//!   label, time, and lease end. `lease_trigger`: the last claim was a triggered run.
//! - `claim_run`, `claim_from`: the last claim's run, and the first run it gave up as too old
//!   (runs `claim_from .. claim_run - 1`), so a claim handed back reports the same runs.
//! - `released`: the last claim's owner confirmed its run ended (released the lease). A claim
//!   that supersedes an unconfirmed one reports that run: its node died, or lost the store
//!   (or the answer to its claim) until its lease ran out, so the run may never have run.
//! - `paused`; `triggers` / `triggers_run`: runs asked for now, and how many were claimed.
//!
//! PostgreSQL 14 or later: `extract(epoch ...)` must be exact (`numeric`). Run numbers are
//! never negative (run 0 is planned at the offset). Divisions are exact integer floors
//! ([`floor_div!`] in `numeric`, [`int_floor_div!`] in `bigint` where the operands cannot
//! overflow), never `numeric` quotients, whose rounding put a takeover's first run a
//! nanosecond inside the old grid's last period.

/// The table, created if missing. Every claim rewrites its row: half-empty pages let the
/// rewrite stay on its page (a HOT update: no new index entry).
pub(super) const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS wheelpool_jobs (
    name          text PRIMARY KEY,
    period_ns     bigint NOT NULL CHECK (period_ns > 0),
    offset_ns     bigint NOT NULL CHECK (offset_ns >= 0),
    last_run      bigint NOT NULL,
    claim_id      bigint NOT NULL DEFAULT 0,
    locked_by     text NOT NULL DEFAULT '',
    node          text NOT NULL DEFAULT '',
    locked_at     timestamptz,
    locked_until  timestamptz NOT NULL DEFAULT 'epoch',
    lease_trigger boolean NOT NULL DEFAULT false,
    released      boolean NOT NULL DEFAULT true,
    claim_run     bigint NOT NULL DEFAULT -1,
    claim_from    bigint NOT NULL DEFAULT 0,
    paused        boolean NOT NULL DEFAULT false,
    triggers      bigint NOT NULL DEFAULT 0,
    triggers_run  bigint NOT NULL DEFAULT 0,
    cron          text NOT NULL DEFAULT ''
) WITH (fillfactor = 50)";

/// Brings a table made before cron jobs up to date: adds its `cron` column (empty: every row
/// it holds is a periodic job, and keeps its runs). Looks in the catalog first, so a table
/// already up to date takes no `ACCESS EXCLUSIVE` lock (which would queue behind claims);
/// run under [`DDL_LOCK_KEY`], after [`CREATE_TABLE`]. Nodes of the earlier version go on
/// working on the table: they never read the column, and a cron job's grid (1 ns) matches
/// none of their settings, so they never run one. Adding the column needs the table's owner's
/// rights (as creating it did); without them the connect fails with the database's error
/// (SQLSTATE 42501), and is tried again at the next connect.
pub(super) const MIGRATE: &str = "DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'wheelpool_jobs'::regclass AND attname = 'cron'
                     AND NOT attisdropped) THEN
        ALTER TABLE wheelpool_jobs ADD COLUMN cron text NOT NULL DEFAULT '';
    END IF;
END $$";

/// Concurrent `CREATE TABLE IF NOT EXISTS` can fail with a unique violation in the catalog:
/// nodes starting together take this advisory lock around it.
pub(super) const DDL_LOCK_KEY: i64 = 0x0077_686c_706f_6f6c; // "whlpool" in ASCII

/// The server's clock now, in nanoseconds since the epoch.
macro_rules! now_ns {
    ($t:literal) => {
        concat!("(extract(epoch FROM ", $t, ") * 1000000000)::bigint")
    };
}

/// `floor(a / b)` in exact integer arithmetic for `b > 0` (`div` truncates toward zero).
macro_rules! floor_div {
    ($a:literal, $b:literal) => {
        concat!(
            "(div((",
            $a,
            ")::numeric, (",
            $b,
            ")::numeric) - CASE WHEN (",
            $a,
            ")::numeric < 0 AND mod((",
            $a,
            ")::numeric, (",
            $b,
            ")::numeric) <> 0 THEN 1 ELSE 0 END)::bigint"
        )
    };
}

/// `floor(a / b)` for `bigint` `a` and `b > 0`, in `bigint` arithmetic (`/` truncates toward
/// zero, `%` takes the sign of `a`): what the claim computes per row, where [`floor_div!`]'s
/// `numeric` is the costlier half of the statement. Sound where `a` cannot leave `bigint`: a
/// time since the epoch minus an offset and a grace, each at most 100 years.
macro_rules! int_floor_div {
    ($a:literal, $b:literal) => {
        concat!(
            "((",
            $a,
            ") / (",
            $b,
            ") - CASE WHEN (",
            $a,
            ") % (",
            $b,
            ") < 0 THEN 1 ELSE 0 END)"
        )
    };
}

/// Registers a job: inserts its row if missing, with `last_run` just before the run due now
/// (so the current period's run is the first claimable one: nothing planned before the job
/// existed is claimed or reported; for a cron job, the occurrences after the registration).
/// Gives the stored period, offset and cron text. `$1` name, `$2` period_ns, `$3` offset_ns,
/// `$4` grace_ns (unused here, kept for one argument list), `$5` cron.
pub(super) const REGISTER: &str = concat!(
    "WITH t AS (SELECT ",
    now_ns!("now()"),
    " AS now_ns),
ins AS (INSERT INTO wheelpool_jobs (name, period_ns, offset_ns, cron, last_run)
    SELECT $1::text, $2::bigint, $3::bigint, $5::text,
           greatest(",
    floor_div!("t.now_ns - $3::bigint", "$2::bigint"),
    " - 1, -1) + 0 * $4::bigint
    FROM t
    ON CONFLICT (name) DO NOTHING
    RETURNING period_ns, offset_ns, cron)
SELECT period_ns, offset_ns, cron FROM ins
UNION ALL
SELECT period_ns, offset_ns, cron FROM wheelpool_jobs
WHERE name = $1::text AND NOT EXISTS (SELECT 1 FROM ins)"
);

/// The stored settings of a job (`$1` name): what [`REGISTER`] reads again when its own snapshot
/// missed a row another node inserted meanwhile.
pub(super) const GRID: &str =
    "SELECT period_ns, offset_ns, cron FROM wheelpool_jobs WHERE name = $1::text";

/// Moves a job to new settings (a takeover). The new grid's count starts after the end of the
/// old grid's last claimed period, so no stretch of time is run twice; runs of the new grid
/// still within the misfire grace are then claimable (and run or reported as any run); older
/// ones, planned before anyone ran the new settings, are not. The lease, if held, stays.
/// A cron job's grid (1 ns) makes the same formula right for it: from a period to a cron
/// schedule, the first claimable occurrence is after the old grid's last claimed period; from
/// one expression to another, after the last occurrence claimed (an instant on both); from a
/// cron schedule to a period, the first run is planned after it.
/// `$1` name, `$2` period_ns, `$3` offset_ns, `$4` grace_ns, `$5` cron. Returns a row if it
/// changed anything.
pub(super) const TAKE_OVER: &str = concat!(
    "UPDATE wheelpool_jobs SET period_ns = $2::bigint, offset_ns = $3::bigint, cron = $5::text,
    last_run = greatest(
        -",
    floor_div!(
        "$3::bigint - offset_ns::numeric - (last_run + 1)::numeric * period_ns",
        "$2::bigint"
    ),
    " - 1,
        ",
    floor_div!("t.now_ns - $4::bigint - $3::bigint", "$2::bigint"),
    " - 1,
        -1)
FROM (SELECT ",
    now_ns!("now()"),
    " AS now_ns) t
WHERE name = $1::text AND (period_ns <> $2::bigint OR offset_ns <> $3::bigint OR cron <> $5::text)
RETURNING last_run"
);

/// The batched claim: one statement, one `now()`, for every job in the arrays. Only rows the
/// claim may change are locked (a run due after `last_run`, a pending trigger, a claim of this
/// owner it never handled): the nodes that find the current run already claimed read it
/// without writing a row lock. Rows locked by another transaction (another node's claim, an
/// administrator) are skipped and answered `busy`, so one locked row never holds up the rest
/// of the batch. Rows not locked can only be answered `mismatch`, `leased`, `taken` or
/// `idle`: `last_run` only grows, so a stale read of them errs on the side of doing nothing.
///
/// Arrays: `$1` name, `$2` period_ns, `$3` offset_ns, `$4` owner, `$5` node, `$6` lease_us,
/// `$7` grace_ns, `$8` known claim_id (the last claim this owner ran), `$9` cron, `$10` want,
/// `$11` until_ns. A periodic claim has `want` NULL: the statement finds the run. A cron
/// claim names its occurrence, `want` (ns since the epoch; `i64::MAX` asks for nothing but
/// the row's state), claimable until `until_ns`; for it `due` is `want` once the store's
/// clock has reached it, and `k` is `want`, or `last_run + 1` if `want` was claimed already.
///
/// Outcomes, in the order they are decided:
/// - `missing`: no row (deleted by hand); `busy`: the row is locked.
/// - `mismatch`: the row's period or offset differ from the request's.
/// - `redeliver`: the row's last claim is this owner's and it never ran it (its answer was
///   lost): the same claim again, lease renewed.
/// - `leased`: another owner's lease is held.
/// - `stale`: a cron claim's `want` is due and unclaimed but past `until_ns` (the node's
///   estimate of the store's clock was behind): nothing changes; the node names another.
/// - `paused` (with a run due): the due runs are given up: `last_run` moves to `due`.
/// - `won`: run `k = max(last_run + 1, oldest claimable run)` is planned at or before now: it
///   is claimed, runs `last_run + 1 .. k - 1` were too old (skipped). A run stays claimable
///   until `grace` after the next run's planned time: the oldest claimable run is
///   `floor((now - grace - offset) / period)`.
/// - `triggered`: no planned run is due but a trigger is pending: claimed.
/// - `taken` (the current run was claimed by another owner) or `idle`.
///
/// A `won` or `triggered` claim also gives the claim it supersedes when that one was never
/// confirmed (`released` false) and was not this owner's last handled claim: its run, and
/// whether it was a trigger.
pub(super) const CLAIM: &str = concat!(
    "WITH t AS (SELECT now() AS now, ",
    now_ns!("now()"),
    " AS now_ns),
r AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[],
                          $6::bigint[], $7::bigint[], $8::bigint[], $9::text[], $10::bigint[],
                          $11::bigint[]) WITH ORDINALITY
      AS r(name, period_ns, offset_ns, owner, node, lease_us, grace_ns, known, cron, want,
           until_ns, i)),
c AS (SELECT j.* FROM wheelpool_jobs j JOIN r ON r.name = j.name CROSS JOIN t
      WHERE (r.want IS NULL AND j.last_run < ",
    int_floor_div!("t.now_ns - j.offset_ns", "j.period_ns"),
    ")
         OR (r.want > j.last_run AND r.want <= t.now_ns AND t.now_ns < r.until_ns)
         OR j.triggers > j.triggers_run OR (j.locked_by = r.owner AND j.claim_id <> r.known)
      ORDER BY j.name FOR UPDATE OF j SKIP LOCKED),
x AS (SELECT r.*, t.now, t.now_ns, c.name IS NOT NULL AS locked, s.name IS NOT NULL AS present,
        (r.want IS NULL AND s.last_run < ",
    int_floor_div!("t.now_ns - s.offset_ns", "s.period_ns"),
    ")
          OR (r.want > s.last_run AND r.want <= t.now_ns AND t.now_ns < r.until_ns)
          OR s.triggers > s.triggers_run OR (s.locked_by = r.owner AND s.claim_id <> r.known)
          AS needs_lock,
        coalesce(c.cron, s.cron) AS s_cron,
        coalesce(c.period_ns, s.period_ns) AS s_period, coalesce(c.offset_ns, s.offset_ns) AS s_offset,
        coalesce(c.last_run, s.last_run) AS last_run, coalesce(c.claim_id, s.claim_id) AS claim_id,
        coalesce(c.locked_by, s.locked_by) AS locked_by, coalesce(c.paused, s.paused) AS paused,
        coalesce(c.triggers, s.triggers) AS triggers,
        coalesce(c.triggers_run, s.triggers_run) AS triggers_run,
        coalesce(c.lease_trigger, s.lease_trigger) AS lease_trigger,
        coalesce(c.released, s.released) AS was_released,
        coalesce(c.claim_run, s.claim_run) AS s_claim_run,
        coalesce(c.claim_from, s.claim_from) AS s_claim_from,
        coalesce(c.locked_until, s.locked_until) AS locked_until
      FROM r CROSS JOIN t LEFT JOIN wheelpool_jobs s ON s.name = r.name
      LEFT JOIN c ON c.name = r.name),
g AS (SELECT x.*, CASE WHEN x.want IS NULL THEN ",
    int_floor_div!("x.now_ns - x.s_offset", "x.s_period"),
    "
          WHEN x.want <= x.now_ns THEN x.want ELSE x.want - 1 END AS due,
        CASE WHEN x.want IS NULL THEN greatest(x.last_run + 1, ",
    int_floor_div!("x.now_ns - x.grace_ns - x.s_offset", "x.s_period"),
    ")
          ELSE greatest(x.want, x.last_run + 1) END AS k,
        x.want IS NOT NULL AND x.now_ns >= x.until_ns AS stale
      FROM x),
d AS (SELECT g.*, CASE
        WHEN NOT g.present THEN 'missing'
        WHEN NOT g.locked AND g.needs_lock THEN 'busy'
        WHEN g.s_period <> g.period_ns OR g.s_offset <> g.offset_ns OR g.s_cron <> g.cron
          THEN 'mismatch'
        WHEN g.locked_by = g.owner AND g.claim_id <> g.known THEN 'redeliver'
        WHEN g.locked_until > g.now AND g.locked_by <> g.owner THEN 'leased'
        WHEN g.k <= g.due AND g.stale THEN 'stale'
        WHEN g.k <= g.due AND g.paused THEN 'paused'
        WHEN g.k <= g.due THEN 'won'
        WHEN g.triggers > g.triggers_run AND NOT g.paused THEN 'triggered'
        WHEN g.last_run >= g.due AND g.locked_by <> g.owner THEN 'taken'
        ELSE 'idle' END AS outcome
      FROM g),
u AS (UPDATE wheelpool_jobs j SET
        last_run = CASE d.outcome WHEN 'won' THEN d.k WHEN 'paused' THEN d.due ELSE j.last_run END,
        claim_id = CASE WHEN d.outcome IN ('won', 'triggered') THEN j.claim_id + 1 ELSE j.claim_id END,
        locked_by = CASE WHEN d.outcome IN ('won', 'triggered') THEN d.owner ELSE j.locked_by END,
        node = CASE WHEN d.outcome IN ('won', 'triggered') THEN d.node ELSE j.node END,
        locked_at = CASE WHEN d.outcome IN ('won', 'triggered') THEN d.now ELSE j.locked_at END,
        locked_until = CASE WHEN d.outcome IN ('won', 'triggered', 'redeliver')
                            THEN d.now + d.lease_us * interval '1 microsecond'
                            ELSE j.locked_until END,
        lease_trigger = CASE d.outcome WHEN 'won' THEN false WHEN 'triggered' THEN true
                                       ELSE j.lease_trigger END,
        released = CASE WHEN d.outcome IN ('won', 'triggered') THEN false ELSE j.released END,
        claim_run = CASE d.outcome WHEN 'won' THEN d.k WHEN 'triggered' THEN j.last_run
                                   ELSE j.claim_run END,
        claim_from = CASE d.outcome WHEN 'won' THEN j.last_run + 1
                                    WHEN 'triggered' THEN j.last_run + 1 ELSE j.claim_from END,
        triggers_run = CASE WHEN d.outcome = 'triggered' THEN j.triggers ELSE j.triggers_run END
      FROM d WHERE j.name = d.name AND d.outcome IN ('won', 'triggered', 'redeliver', 'paused')
      RETURNING j.name, j.claim_run AS new_run, j.claim_id AS new_claim,
                j.lease_trigger AS new_trigger, j.triggers > j.triggers_run AS trigger_left,
                j.claim_from AS new_from)
SELECT d.i, d.outcome, d.s_period, d.s_offset, d.last_run, d.k, d.due,
       CASE WHEN d.outcome = 'leased' THEN ",
    now_ns!("d.locked_until"),
    " END,
       CASE WHEN d.outcome = 'paused' THEN d.due ELSE u.new_run END, u.new_claim,
       u.new_trigger, coalesce(u.trigger_left, false),
       (SELECT ",
    now_ns!("clock_timestamp()"),
    "),
       CASE WHEN d.outcome IN ('won', 'triggered') AND d.claim_id > 0 AND NOT d.was_released
                 AND NOT (d.locked_by = d.owner AND d.claim_id = d.known)
            THEN d.s_claim_run END,
       d.lease_trigger, u.new_from, d.s_cron
FROM d LEFT JOIN u ON u.name = d.name"
);

/// The batched release: ends each lease now if its owner still holds it for that claim, marks
/// the claim confirmed, and says for each whether it did, whether the row is locked by
/// another transaction (`busy`: skipped, so one locked row holds up no other job's release;
/// the chain sends it again), or whether the row still holds that claim (expired) or a later
/// one (taken over). Arrays: `$1` name, `$2` claim_id, `$3` owner.
pub(super) const RELEASE: &str = "WITH r AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[]) WITH ORDINALITY
        AS r(name, claim_id, owner, i)),
c AS (SELECT j.name FROM wheelpool_jobs j
      JOIN r ON r.name = j.name AND r.claim_id = j.claim_id AND r.owner = j.locked_by
      ORDER BY j.name FOR UPDATE OF j SKIP LOCKED),
u AS (UPDATE wheelpool_jobs j
      SET locked_until = least(j.locked_until, now()), released = true FROM c
      WHERE j.name = c.name
      RETURNING j.name, j.locked_until = now() AS in_time)
SELECT r.i, coalesce(u.in_time, false),
       coalesce(s.claim_id = r.claim_id AND s.locked_by = r.owner, false),
       u.name IS NULL AND coalesce(s.claim_id = r.claim_id AND s.locked_by = r.owner, false)
FROM r LEFT JOIN u ON u.name = r.name LEFT JOIN wheelpool_jobs s ON s.name = r.name";

/// Extends a lease held by this owner for this claim to `now + lease`, unless the claim was
/// released meanwhile (a renewal that waited for the release's row lock must not revive the
/// lease). `$1` name, `$2`
/// claim_id, `$3` owner, `$4` lease_us. Answers as [`RELEASE`] does for one job.
pub(super) const RENEW: &str = "WITH r AS (
    UPDATE wheelpool_jobs SET locked_until = now() + $4::bigint * interval '1 microsecond'
    WHERE name = $1::text AND claim_id = $2::bigint AND locked_by = $3::text
      AND locked_until > now() AND NOT released
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM r),
       coalesce((SELECT claim_id = $2::bigint AND locked_by = $3::text
                 FROM wheelpool_jobs WHERE name = $1::text), false)";

/// The job table, by the server's clock.
pub(super) const JOBS: &str = concat!(
    "SELECT name, period_ns, offset_ns, last_run, claim_id, node, ",
    now_ns!("coalesce(locked_at, 'epoch')"),
    ", ",
    now_ns!("locked_until"),
    ", paused, triggers - triggers_run, ",
    now_ns!("now()"),
    ", cron FROM wheelpool_jobs ORDER BY name"
);

/// `$1` name, `$2` paused.
pub(super) const SET_PAUSED: &str =
    "UPDATE wheelpool_jobs SET paused = $2::boolean WHERE name = $1::text";

/// `$1` name.
pub(super) const TRIGGER: &str =
    "UPDATE wheelpool_jobs SET triggers = triggers + 1 WHERE name = $1::text";
