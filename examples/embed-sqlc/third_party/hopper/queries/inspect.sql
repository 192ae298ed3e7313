-- name: Stats :many
-- Per queue and kind: ready, scheduled (run_at in the future), running,
-- waiting (for their turn in a sequence), dead and cancelled counts; the age of the oldest ready job (claim lag);
-- failing: the live jobs that have failed at least once (the retry rate is
-- failing over ready + scheduled + running); and whether the queue is
-- paused.
WITH live AS (
    SELECT queue, kind,
           count(*) FILTER (WHERE state = 'pending' AND run_at <= now()) AS ready,
           count(*) FILTER (WHERE state = 'scheduled' OR (state = 'pending' AND run_at > now())) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'waiting') AS waiting,
           count(*) FILTER (WHERE errors <> '[]'::jsonb) AS failing,
           min(run_at) FILTER (WHERE state = 'pending' AND run_at <= now()) AS oldest_ready
    FROM hopper_jobs
    GROUP BY queue, kind
), dead AS (
    SELECT queue, kind,
           count(*) FILTER (WHERE state = 'dead') AS dead,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled
    FROM hopper_dead_jobs
    GROUP BY queue, kind
)
SELECT coalesce(live.queue, dead.queue)::text AS queue,
       coalesce(live.kind, dead.kind)::text AS kind,
       coalesce(live.ready, 0)::bigint AS ready,
       coalesce(live.scheduled, 0)::bigint AS scheduled,
       coalesce(live.running, 0)::bigint AS running,
       coalesce(live.waiting, 0)::bigint AS waiting,
       coalesce(dead.dead, 0)::bigint AS dead,
       coalesce(dead.cancelled, 0)::bigint AS cancelled,
       coalesce(extract(epoch FROM now() - live.oldest_ready), 0)::float8 AS oldest_ready_seconds,
       coalesce(live.failing, 0)::bigint AS failing,
       (q.paused_at IS NOT NULL)::boolean AS paused
FROM live
FULL JOIN dead ON dead.queue = live.queue AND dead.kind = live.kind
LEFT JOIN hopper_queues AS q ON q.name = coalesce(live.queue, dead.queue)
ORDER BY 1, 2;

-- name: GetJob :one
-- One live job by id.
SELECT * FROM hopper_jobs WHERE id = @id::bigint;

-- name: GetDead :one
-- One dead (or cancelled) job by id.
SELECT * FROM hopper_dead_jobs WHERE id = @id::bigint;

-- name: FindJob :one
-- One job by id, wherever it is: live, dead, cancelled or completed (in
-- the history). No row: Hopper has no job of that id (never enqueued,
-- completed without history, or purged).
SELECT * FROM hopper_all_jobs WHERE id = @id::bigint;

-- name: ListJobs :many
-- Jobs of every state, newest (highest id) first, up to max_jobs after the
-- keyset cursor before_id (the last id of the previous page; pass the
-- largest bigint for the first). Every filter is optional: states (empty:
-- all; a table whose states are all excluded is not read), queue, kind,
-- and created_at in [created_from, created_to). The plan is an index scan
-- per table backwards from before_id, merged, so a page costs the rows it
-- reads however deep it is; a filter that matches few rows reads more of
-- them (see docs/operating.md). Searching by unique key is ListJobsByKey.
SELECT * FROM hopper_all_jobs AS a
WHERE a.id < @before_id::bigint
  AND (cardinality(@states::text[]) = 0 OR a.state = ANY(@states::text[]))
  AND (sqlc.narg(queue)::text IS NULL OR a.queue = sqlc.narg(queue)::text)
  AND (sqlc.narg(kind)::text IS NULL OR a.kind = sqlc.narg(kind)::text)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR a.created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR a.created_at < sqlc.narg(created_to)::timestamptz)
ORDER BY a.id DESC
LIMIT @max_jobs::integer;

-- name: ListJobsByKey :many
-- ListJobs for the jobs that carry one unique key: at most one live job,
-- and any number of dead, cancelled and completed ones. Each table is read
-- through its unique_key index, whatever the other filters.
SELECT * FROM hopper_all_jobs AS a
WHERE a.unique_key = @unique_key::text
  AND a.id < @before_id::bigint
  AND (cardinality(@states::text[]) = 0 OR a.state = ANY(@states::text[]))
  AND (sqlc.narg(queue)::text IS NULL OR a.queue = sqlc.narg(queue)::text)
  AND (sqlc.narg(kind)::text IS NULL OR a.kind = sqlc.narg(kind)::text)
  AND (sqlc.narg(created_from)::timestamptz IS NULL OR a.created_at >= sqlc.narg(created_from)::timestamptz)
  AND (sqlc.narg(created_to)::timestamptz IS NULL OR a.created_at < sqlc.narg(created_to)::timestamptz)
ORDER BY a.id DESC
LIMIT @max_jobs::integer;

-- name: SchemaExists :one
-- Whether a schema of that name exists (checked before migrating into it).
SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = @name::text) AS exists;

-- name: MigrationsTableAccess :one
-- Whether the schema's migrations table exists (in_schema names the schema,
-- '' for this session's current one), whether this session's role may
-- read it, who that role is and in which database: schema.Check's first
-- question, which needs no DDL rights.
SELECT coalesce(nullif(@in_schema::text, ''), current_schema(), '')::text AS schema_name,
       (to_regclass(format('%I.hopper_schema_migrations', coalesce(nullif(@in_schema::text, ''), current_schema()))) IS NOT NULL)::boolean AS table_exists,
       coalesce(has_table_privilege(to_regclass(format('%I.hopper_schema_migrations', coalesce(nullif(@in_schema::text, ''), current_schema()))), 'SELECT'), false)::boolean AS readable,
       current_user::text AS role_name,
       current_database()::text AS database_name;

-- name: WaitForMigrations :exec
-- Waits, until this transaction ends, for golang-migrate's advisory lock on
-- a schema's migrations (lock_id is golang-migrate's number for the
-- database, schema and table): a migration running now records its
-- version dirty until it ends, so a dirty version read under this lock is
-- one that no migration in progress explains. Needs no privilege.
SELECT pg_advisory_xact_lock(@lock_id::bigint);

-- name: LockMigrationRun :exec
-- Takes, for as long as this session lasts, Hopper's own advisory lock on
-- a schema's migrations (lock_id: golang-migrate's number for the
-- database, schema, table and "run"). A Hopper migrator holds it around
-- its whole run: the version check, golang-migrate's own run and, when a
-- migration rolled back on a lock wait, the clearing of the dirty mark it
-- left. golang-migrate gives its own lock back with that mark still set,
-- so a migrator waiting only for that lock read the healthy schema as
-- dirty; waiting for this one first, it never sees the mark. Bounded by
-- the session's lock_timeout, like every other lock wait of a migrator.
SELECT pg_advisory_lock(@lock_id::bigint);

-- name: HopperSchema :one
-- The schema in which this session finds hopper_jobs (the schema wake-ups
-- are tagged with). No row when the migrations were never applied on its
-- search_path.
SELECT n.nspname::text AS schema_name
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('hopper_jobs');

-- name: TableActivity :one
-- Rows ever inserted into and deleted from hopper_jobs, from the statistics
-- collector (updated about once a second): enqueue and finish rates.
SELECT coalesce(n_tup_ins, 0)::bigint AS inserted, coalesce(n_tup_del, 0)::bigint AS deleted
FROM pg_catalog.pg_stat_user_tables
WHERE relid = to_regclass('hopper_jobs');

-- name: BackendPID :one
-- The server process this statement ran in. A client that reached the
-- server directly was told the same number when it connected; behind a
-- pooler such as PgBouncer it was told the pooler's own, so the two differ.
SELECT pg_backend_pid()::integer AS pid;

-- name: ReadLag :one
-- Whether this session reads a standby, and how stale what it reads may
-- be: nothing while it streams from its primary and has replayed all the
-- WAL it has received, else the age of the last transaction it replayed
-- (on a busy primary, about how far replay trails it). A standby whose WAL
-- receiver is not running (its primary died, or cannot be reached) has
-- replayed all it received and may still be far behind: receiving is
-- false, and the age is only a lower bound. The receiver's pid is visible
-- to any role (only its details are not). A primary reads its own writes:
-- false, 0.
SELECT pg_is_in_recovery() AS standby,
       (NOT pg_is_in_recovery() OR EXISTS (SELECT FROM pg_stat_get_wal_receiver() AS r WHERE r.pid IS NOT NULL))::boolean AS receiving,
       (CASE
            WHEN NOT pg_is_in_recovery() THEN 0
            WHEN EXISTS (SELECT FROM pg_stat_get_wal_receiver() AS r WHERE r.pid IS NOT NULL)
                 AND pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
            ELSE coalesce(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0)
        END)::float8 AS lag_seconds;

-- name: JobIDIssued :one
-- Whether the job id was handed out by hopper_jobs_id_seq (false when the
-- role may not read the sequence): WaitJob's answer for a job in no
-- table, which either ended and left no row or was never enqueued. The
-- CASE keeps pg_sequence_last_value from raising for a role without the
-- sequence's USAGE or SELECT.
SELECT coalesce(@id::bigint BETWEEN 1 AND (
    SELECT CASE WHEN has_sequence_privilege(s.seq::oid, 'SELECT, USAGE')
                THEN pg_sequence_last_value(s.seq) END
    FROM (SELECT to_regclass('hopper_jobs_id_seq') AS seq) AS s
), false)::boolean AS issued;

-- name: EncryptionKeys :many
-- The keys that encrypted stored values (jobs.Encrypted: a jsonb object
-- whose one key is 'hopper.encrypted'), counted by where they are
-- (payload: a job's payload, live, dead or in the history; step: a
-- durable step's result or the payload an event brought; event: an
-- emitted event's payload), the kind of their job ('' for an event) and
-- the key's id. A key no row names can leave the keyring. Reads every
-- row of these tables: an operator's query, not a worker's.
WITH sealed AS (
    SELECT 'payload'::text AS place, kind, payload -> 'hopper.encrypted' ->> 'key' AS key_id
    FROM hopper_jobs WHERE payload ? 'hopper.encrypted'
    UNION ALL
    SELECT 'payload', kind, payload -> 'hopper.encrypted' ->> 'key'
    FROM hopper_dead_jobs WHERE payload ? 'hopper.encrypted'
    UNION ALL
    SELECT 'payload', kind, payload -> 'hopper.encrypted' ->> 'key'
    FROM hopper_job_history WHERE payload ? 'hopper.encrypted'
    UNION ALL
    SELECT 'step', coalesce(j.kind, ''), s.result -> 'hopper.encrypted' ->> 'key'
    FROM hopper_job_steps AS s
    LEFT JOIN hopper_all_jobs AS j ON j.id = s.job_id
    WHERE s.result ? 'hopper.encrypted'
    UNION ALL
    SELECT 'event', '', payload -> 'hopper.encrypted' ->> 'key'
    FROM hopper_events WHERE payload ? 'hopper.encrypted'
)
SELECT place::text AS place, kind::text AS kind, coalesce(key_id, '')::text AS key_id, count(*)::bigint AS values
FROM sealed
GROUP BY place, kind, key_id
ORDER BY key_id, place, kind;

-- name: CountLiveAndDead :one
-- How many jobs live and dead a schema holds: what `hopper migrate down`
-- says it would drop before asking to go on.
SELECT (SELECT count(*) FROM hopper_jobs)::bigint AS live,
       (SELECT count(*) FROM hopper_dead_jobs)::bigint AS dead;
