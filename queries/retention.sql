-- name: PruneHistory :execrows
-- Deletes up to max_jobs completed jobs whose keep_until has passed.
-- Every worker runs it on its sweep interval; SKIP LOCKED and the bounded
-- batch make that safe and cheap, as for Sweep. Like Sweep it looks only at
-- rows that expired within the last within_ms (0: all), so a worker that
-- pruned everything a moment ago seeks past the index entries of rows it
-- deleted (kept while any older snapshot is open). The edges of a
-- workflow step (to its parents) go with it, through their child index.
-- It reads only the history's default partition (drop_after NULL): the
-- other partitions go whole (DropHistoryPartitions).
WITH doomed AS (
    SELECT old.id
    FROM hopper_job_history AS old
    WHERE old.drop_after IS NULL
      AND old.keep_until < now()
      AND old.keep_until >= coalesce(now() - '1 millisecond'::interval * nullif(@within_ms::bigint, 0), '-infinity')
    ORDER BY old.keep_until
    LIMIT @max_jobs::integer
    FOR UPDATE SKIP LOCKED
), edges AS (
    DELETE FROM hopper_workflow_deps AS d
    WHERE d.child_id IN (SELECT doomed.id FROM doomed)
)
DELETE FROM hopper_job_history AS h
WHERE h.drop_after IS NULL
  AND h.id IN (SELECT doomed.id FROM doomed);

-- name: PruneUniquePeriods :execrows
-- Deletes up to max_keys records of unique keys whose period has ended
-- (hopper_unique_periods, written by enqueues with jobs.UniquePeriod), the
-- oldest first. SKIP LOCKED lets every worker run it.
DELETE FROM hopper_unique_periods AS r
WHERE r.unique_key IN (SELECT e.unique_key
                       FROM hopper_unique_periods AS e
                       WHERE e.expires_at < now()
                       ORDER BY e.expires_at
                       LIMIT @max_keys::integer
                       FOR UPDATE SKIP LOCKED);

-- name: EnsureHistoryPartitions :one
-- Creates partitions of the history of width_ms each until they cover
-- now() + ahead_ms (at most 100 per call) and returns how many it made;
-- see hopper_history_partitions_ensure (migration 21). Every worker runs
-- it on its prune interval; the function lets one run at a time.
SELECT hopper_history_partitions_ensure('1 millisecond'::interval * @width_ms::bigint,
                                        '1 millisecond'::interval * @ahead_ms::bigint)::integer AS created;

-- name: HistoryHasRows :one
-- Whether the history holds any row: a worker creates partitions only for
-- a history that is used (a row is kept, or partitions were made before
-- and still hold rows), not for every worker whose KeepWorkflowSteps
-- would keep steps it never runs.
SELECT EXISTS (SELECT FROM hopper_job_history) AS used;

-- name: DropHistoryPartitions :one
-- Drops the history's partitions whose range has passed and returns how
-- many (hopper_history_partitions_drop, migration 21).
SELECT hopper_history_partitions_drop()::integer AS dropped;

-- name: HistoryPartitions :many
-- The history's partitions, oldest first.
SELECT p.name, p.lower_at, p.upper_at
FROM hopper_history_partitions AS p
ORDER BY p.lower_at;

-- name: PruneDead :execrows
-- Deletes up to max_jobs dead and cancelled jobs of the given queues (the
-- worker's own) that died longer than retention_ms ago, the oldest first:
-- those in the dead jobs' default partition (partition_at NULL), and
-- those in time partitions that have expired for this retention but that
-- DropDeadPartitions keeps because another queue's jobs are still in
-- them. The other time partitions go whole (DropDeadPartitions), so after
-- an unhindered drop no expired partition is left and this reads the
-- default partition only. A job of another queue is left to the workers
-- of that queue, under their own retention: several applications share a
-- schema, each keeping its dead jobs as long as it says. SKIP LOCKED lets
-- every worker run it. The edges of a workflow step (to its parents) go
-- with it, as PurgeDead's do.
WITH held AS (
    SELECT max(p.upper_at) AS upper_at
    FROM hopper_dead_partitions AS p
    WHERE p.upper_at + '1 millisecond'::interval * @retention_ms::bigint <= now()
), doomed AS (
    SELECT old.id
    FROM hopper_dead_jobs AS old
    WHERE (old.partition_at IS NULL OR old.partition_at < (SELECT held.upper_at FROM held))
      AND old.queue = ANY (@queues::text[])
      AND old.died_at < now() - '1 millisecond'::interval * @retention_ms::bigint
    ORDER BY old.died_at
    LIMIT @max_jobs::integer
    FOR UPDATE SKIP LOCKED
), edges AS (
    DELETE FROM hopper_workflow_deps AS d
    WHERE d.child_id IN (SELECT doomed.id FROM doomed)
)
DELETE FROM hopper_dead_jobs AS dead
WHERE (dead.partition_at IS NULL OR dead.partition_at < (SELECT held.upper_at FROM held))
  AND dead.id IN (SELECT doomed.id FROM doomed);

-- name: EnsureDeadPartitions :one
-- Creates partitions of the dead jobs of width_ms each until they cover
-- now() + ahead_ms (at most 100 per call) and returns how many it made;
-- see hopper_dead_partitions_ensure (migration 24).
SELECT hopper_dead_partitions_ensure('1 millisecond'::interval * @width_ms::bigint,
                                     '1 millisecond'::interval * @ahead_ms::bigint)::integer AS created;

-- name: DeadPartitionHeld :one
-- The start of the first partition of the dead jobs that has expired for
-- retention_ms but holds a job of a queue not given (not the worker's
-- own) in held_from, held false when none does: that job is kept for its own workers'
-- retention, which may be longer (another application in the schema), so
-- DropDeadPartitions drops only the partitions before it, and the
-- worker's own jobs in it and after it are deleted row by row
-- (PruneDead) until the other queue's are gone too. Only the expired
-- partitions are read, each until its first job of another queue. A
-- statement of its own: a partition this statement reads cannot be
-- dropped by the same statement. The lateral LIMIT 1 reads one partition
-- at a time (pruned at run time), each until its first job of another
-- queue, in order, stopping at the first that holds one: an EXISTS would
-- be planned as a join that reads every partition whole.
SELECT (held.lower_at IS NOT NULL)::boolean AS held,
       coalesce(held.lower_at, now())::timestamptz AS held_from
FROM (SELECT NULL::timestamptz) AS one
LEFT JOIN (
    SELECT e.lower_at
    FROM hopper_dead_partitions AS e
    CROSS JOIN LATERAL (SELECT 1 AS found
                        FROM hopper_dead_jobs AS d
                        WHERE d.partition_at >= e.lower_at AND d.partition_at < e.upper_at
                          AND d.queue <> ALL (@queues::text[])
                        LIMIT 1) AS other
    WHERE e.upper_at + '1 millisecond'::interval * @retention_ms::bigint <= now()
    ORDER BY e.lower_at
    LIMIT 1
) AS held ON true;

-- name: DropDeadPartitions :one
-- Drops the dead jobs' partitions whose jobs all died longer than
-- retention_ms ago and returns how many (hopper_dead_partitions_drop,
-- migration 24), but none from held_from on (DeadPartitionHeld; NULL:
-- no limit): a retention reaching back to held_from drops exactly the
-- partitions that end by then (greatest ignores a NULL).
SELECT hopper_dead_partitions_drop(greatest('1 millisecond'::interval * @retention_ms::bigint,
                                            now() - sqlc.narg(held_from)::timestamptz))::integer AS dropped;

-- name: DeadPartitions :many
-- The dead jobs' partitions, oldest first.
SELECT p.name, p.lower_at, p.upper_at
FROM hopper_dead_partitions AS p
ORDER BY p.lower_at;
