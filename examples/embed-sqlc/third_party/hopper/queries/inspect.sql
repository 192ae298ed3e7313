-- name: Stats :many
-- Per queue and kind: ready, scheduled (run_at in the future),
-- running and dead counts; the age of the oldest ready job (claim lag); and
-- the retry rate: the share of live jobs that have failed at least once.
WITH live AS (
    SELECT queue, kind,
           count(*) FILTER (WHERE state = 'pending' AND run_at <= now()) AS ready,
           count(*) FILTER (WHERE state = 'scheduled' OR (state = 'pending' AND run_at > now())) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE errors <> '[]'::jsonb) AS failing,
           count(*) AS total,
           min(run_at) FILTER (WHERE state = 'pending' AND run_at <= now()) AS oldest_ready
    FROM hopper_jobs
    GROUP BY queue, kind
), dead AS (
    SELECT queue, kind, count(*) AS dead
    FROM hopper_dead_jobs
    GROUP BY queue, kind
)
SELECT coalesce(live.queue, dead.queue)::text AS queue,
       coalesce(live.kind, dead.kind)::text AS kind,
       coalesce(live.ready, 0)::bigint AS ready,
       coalesce(live.scheduled, 0)::bigint AS scheduled,
       coalesce(live.running, 0)::bigint AS running,
       coalesce(dead.dead, 0)::bigint AS dead,
       coalesce(extract(epoch FROM now() - live.oldest_ready), 0)::float8 AS oldest_ready_seconds,
       coalesce(live.failing::float8 / nullif(live.total, 0), 0)::float8 AS retry_rate
FROM live
FULL JOIN dead ON dead.queue = live.queue AND dead.kind = live.kind
ORDER BY 1, 2;

-- name: GetJob :one
-- One live job by id.
SELECT * FROM hopper_jobs WHERE id = @id::bigint;

-- name: Cancel :many
-- Deletes the given jobs if they are not running. One row per requested id says
-- what happened: cancelled, running (claimed: not cancelled), dead (in the
-- dead table: use purge) or not_found.
WITH cancelled AS (
    DELETE FROM hopper_jobs
    WHERE id = ANY(@ids::bigint[]) AND state <> 'running'
    RETURNING id
)
SELECT requested.id::bigint AS id,
       (CASE
           WHEN cancelled.id IS NOT NULL THEN 'cancelled'
           WHEN live.id IS NOT NULL THEN 'running'
           WHEN dead.id IS NOT NULL THEN 'dead'
           ELSE 'not_found'
       END)::text AS outcome
FROM (SELECT DISTINCT unnest(@ids::bigint[]) AS id) AS requested
LEFT JOIN cancelled ON cancelled.id = requested.id
LEFT JOIN hopper_jobs AS live ON live.id = requested.id
LEFT JOIN hopper_dead_jobs AS dead ON dead.id = requested.id
ORDER BY requested.id;

-- name: PurgeQueue :execrows
-- Deletes every pending and scheduled job of a queue. Running jobs are left
-- to finish.
DELETE FROM hopper_jobs WHERE queue = @queue::text AND state <> 'running';

-- name: ListDead :many
-- Dead jobs, newest first, optionally of one kind and queue, after the
-- keyset cursor (before_died_at, before_id) for paging.
SELECT * FROM hopper_dead_jobs
WHERE (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind)::text)
  AND (sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)::text)
  AND (died_at, id) < (@before_died_at::timestamptz, @before_id::bigint)
ORDER BY died_at DESC, id DESC
LIMIT @max_jobs::integer;

-- name: GetDead :one
-- One dead job by id.
SELECT * FROM hopper_dead_jobs WHERE id = @id::bigint;

-- name: RetryDead :many
-- Moves the given dead jobs back to the live table under their own ids,
-- ready now, with a fresh set of attempts and their error history kept. A
-- job whose unique key a live job holds again stays dead: nothing is lost,
-- and the ids that moved come back.
WITH revived AS (
    INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, attempt,
                             max_attempts, unique_key, errors, created_at)
    OVERRIDING SYSTEM VALUE
    SELECT id, queue, kind, version, payload, priority, 0,
           max_attempts, unique_key, errors, created_at
    FROM hopper_dead_jobs
    WHERE id = ANY(@ids::bigint[])
    ON CONFLICT DO NOTHING
    RETURNING id
)
DELETE FROM hopper_dead_jobs AS dead
USING revived
WHERE dead.id = revived.id
RETURNING dead.id;

-- name: RetryDeadKind :many
-- RetryDead for every dead job of one kind.
WITH revived AS (
    INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, attempt,
                             max_attempts, unique_key, errors, created_at)
    OVERRIDING SYSTEM VALUE
    SELECT id, queue, kind, version, payload, priority, 0,
           max_attempts, unique_key, errors, created_at
    FROM hopper_dead_jobs
    WHERE kind = @kind::text
    ON CONFLICT DO NOTHING
    RETURNING id
)
DELETE FROM hopper_dead_jobs AS dead
USING revived
WHERE dead.id = revived.id
RETURNING dead.id;

-- name: PurgeDead :execrows
-- Deletes dead jobs that died before died_before.
DELETE FROM hopper_dead_jobs WHERE died_at < @died_before::timestamptz;

-- name: SchemaExists :one
-- Whether a schema of that name exists (checked before migrating into it).
SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = @name::text) AS exists;

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
