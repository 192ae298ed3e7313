-- Retrying dead jobs in one shard through the Citus coordinator
-- (Set.RetrySequence, Set.RetryWorkflow). hopper.Client's RetryDead and
-- hopper_workflow_retry are one statement of CTEs each (an INSERT … SELECT
-- feeds the dead jobs' DELETE), which Citus 13.2.2 fails to plan on a
-- shard ('syntax error at or near "NOT"', 'could not create distributed
-- plan'), as it fails Cancel's (cancel.sql). These statements do the same,
-- each planned by Citus as one task on the shard's node, in one
-- transaction: lock the dead jobs, insert each back into the live table
-- under its own id (a sequence's head waiting: its commit makes it the
-- head again, which lifts the block; a workflow's step waiting when it has
-- parents, for the insert trigger to count those still live, else
-- pending), then delete it from the dead table. Unqualified names: the statements run in
-- the shard's schema (search_path set per statement).

-- name: RetryDeadLock :one
-- The dead (or cancelled) job, locked.
SELECT d.id, d.queue, d.kind, d.version, d.payload, d.priority, d.attempt, d.max_attempts,
       d.unique_key, d.errors, d.created_at, d.meta, d.concurrency_key
FROM hopper_dead_jobs AS d
WHERE d.id = @id::bigint AND d.state IN ('dead', 'cancelled')
FOR UPDATE OF d;

-- name: RetryWorkflowTurn :exec
-- Revivals of one workflow take turns (hopper_workflow_retry's lock):
-- this statement reads no table, so Citus runs it on the coordinator,
-- where every revival through the Set takes it.
SELECT pg_advisory_xact_lock(hopper_workflow_lock_id(@workflow::text));

-- name: RetryWorkflowLock :many
-- The dead (or cancelled) steps of a workflow, locked in id order; a step
-- another transaction holds (a purge) is that one's.
SELECT d.id, d.queue, d.kind, d.version, d.payload, d.priority, d.attempt, d.max_attempts,
       d.unique_key, d.errors, d.created_at, d.meta, d.concurrency_key
FROM hopper_dead_jobs AS d
WHERE d.meta ? 'hopper.workflow' AND (d.meta ->> 'hopper.workflow') = @workflow::text
ORDER BY d.id
FOR UPDATE OF d SKIP LOCKED;

-- name: RetryWithParents :many
-- Which of the steps have parents (edges kept in hopper_workflow_deps).
SELECT DISTINCT e.child_id FROM hopper_workflow_deps AS e WHERE e.child_id = ANY(@ids::bigint[]);

-- name: RetryRevive :many
-- The locked job back in the live table, in the state given, with as many attempts
-- again as it had (max_attempts: RetryDead's arithmetic, in Go); no row when a live job holds
-- its unique key again (it stays dead). An empty unique or concurrency
-- key stands for none (neither can be empty).
INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, attempt,
                         max_attempts, unique_key, errors, created_at, meta, concurrency_key, state)
OVERRIDING SYSTEM VALUE
VALUES (@id::bigint, @queue::text, @kind::text, @version::integer, @payload::jsonb, @priority::smallint, @attempt::integer,
        @max_attempts::integer, nullif(@unique_key::text, ''),
        @errors::jsonb, @created_at::timestamptz, @meta::jsonb, nullif(@concurrency_key::text, ''), @state::text)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: RetryDeadRemove :exec
-- The revived job out of the dead table.
DELETE FROM hopper_dead_jobs AS d WHERE d.id = @id::bigint;
