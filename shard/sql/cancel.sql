-- Cancelling jobs of one shard through the Citus coordinator (Set.CancelJobs).
-- hopper.Client's Cancel is one statement (its DELETE … RETURNING feeds the
-- dead jobs' INSERT), which Citus 13.2.2 plans with intermediate results
-- and fails ('invalid input syntax for type bigint: "PGCOPY"'), and an
-- INSERT … SELECT between the shard's tables is deparsed with an empty
-- qualifier. These statements do the same, each planned by Citus as one
-- task on the shard's node, in one transaction: lock the jobs, copy them
-- into hopper_dead_jobs as cancelled, then delete them, so that the
-- delete's triggers (sequences, workflows, awaited jobs) find them dead,
-- as after Cancel's one statement. Unqualified names: the statements run
-- in the shard's schema (search_path set per statement).

-- name: CancelPartition :one
-- The dead-jobs partition key a row gets now (the column's default,
-- evaluated here, alone: Citus refuses it inside the insert, where it
-- reads a table of the shard mid-statement).
-- covered is false without one (the key is then NULL), else the key is at.
SELECT (hopper_dead_partition_at(statement_timestamp()) IS NOT NULL)::boolean AS covered,
       statement_timestamp()::timestamptz AS at;

-- name: CancelLock :many
-- The live jobs asked for, locked in id order, as every statement that
-- waits for row locks takes them.
SELECT j.id, j.queue, j.kind, j.version, j.payload, j.priority, j.attempt, j.max_attempts,
       j.unique_key, j.errors, j.created_at, j.run_at, j.meta, j.concurrency_key
FROM hopper_jobs AS j
WHERE j.id = ANY(@ids::bigint[])
ORDER BY j.id
FOR UPDATE OF j;

-- name: CancelBury :exec
-- The locked jobs, as CancelLock read them, into the dead table as
-- cancelled (Cancel's 'cancelled' reason and state). An empty unique or
-- concurrency key stands for none (neither can be empty).
INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts,
                              unique_key, errors, reason, created_at, run_at, state, meta, concurrency_key, partition_at)
SELECT b.id, b.queue, b.kind, b.version, b.payload, b.priority, b.attempt, b.max_attempts,
       b.unique_key, b.errors, 'cancelled', b.created_at, b.run_at, 'cancelled', b.meta, b.concurrency_key,
       sqlc.narg('partition_at')::timestamptz
FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@queues::text[]) AS queue, unnest(@kinds::text[]) AS kind,
             unnest(@versions::integer[]) AS version, unnest(@payloads::jsonb[]) AS payload,
             unnest(@priorities::smallint[]) AS priority, unnest(@attempts::integer[]) AS attempt,
             unnest(@max_attempts::integer[]) AS max_attempts, nullif(unnest(@unique_keys::text[]), '') AS unique_key,
             unnest(@errors::jsonb[]) AS errors, unnest(@created_ats::timestamptz[]) AS created_at,
             unnest(@run_ats::timestamptz[]) AS run_at, unnest(@metas::jsonb[]) AS meta,
             nullif(unnest(@concurrency_keys::text[]), '') AS concurrency_key) AS b;

-- name: CancelRemove :many
-- The locked jobs out of the live table; their state, attempt and lease
-- owner say which running claims to tell.
DELETE FROM hopper_jobs AS j
WHERE j.id = ANY(@ids::bigint[])
RETURNING j.id, j.state, j.attempt, j.lease_owner;

-- name: CancelFinished :many
-- What the ids not cancelled are: completed (where history is kept), dead
-- or cancelled; absent ones are not found.
SELECT a.id, a.state
FROM hopper_all_jobs AS a
WHERE a.id = ANY(@ids::bigint[]);
