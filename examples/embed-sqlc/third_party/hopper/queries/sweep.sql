-- name: Sweep :many
-- Takes up to max_jobs running jobs whose lease has expired and appends
-- "lease expired" to their history. A job with attempts left goes back to
-- pending, ready at once; a job on its last attempt moves to
-- hopper_dead_jobs. SKIP LOCKED and the bounded batch make it safe and cheap
-- to run from every worker at the same time: each expired job is moved once.
-- Returns one row per job moved; dead tells where it went. A requeued job's
-- priority and run_at tell workers where it sits in claim order (Notify).
-- The dead table's rows are made from the locked rows themselves, not by
-- joining the delete's answer back (see NackBatch). The requeued jobs are
-- updated through j.id = ANY (ARRAY[expired.id]) and the dead ones deleted
-- by an array of their ids, so that each is found by primary key whatever
-- the statistics say (see NackBatch). The dead ones are deleted by the
-- ids buried returns, so that on Citus, where each part of the statement
-- runs as a statement of its own, the delete's triggers (sequences,
-- workflows, durable jobs) find them dead, as on PostgreSQL (NackBatch).
WITH expired AS (
    SELECT j.id, j.queue, j.kind, j.version, j.payload, j.priority, j.attempt, j.max_attempts,
           j.unique_key, j.created_at, j.run_at, j.meta, j.concurrency_key,
           j.errors || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt,
               'at', now(),
               'owner', j.lease_owner,
               'error', 'lease expired')) AS errors,
           j.attempt >= j.max_attempts AS exhausted
    FROM hopper_jobs AS j
    WHERE j.state = 'running'
      AND j.lease_until < now()
      -- Only leases that expired within the last within_ms (0: all). The
      -- lease index's first entries belong to jobs long finished: dead, but
      -- kept until vacuum runs, and however long any session holds an
      -- older snapshot open. A worker that swept everything a moment ago
      -- seeks past them, and sweeps in full now and then.
      AND j.lease_until >= coalesce(now() - '1 millisecond'::interval * nullif(@within_ms::bigint, 0), '-infinity')
    ORDER BY j.lease_until
    LIMIT @max_jobs::integer
    FOR UPDATE SKIP LOCKED
), requeued AS (
    UPDATE hopper_jobs AS j
    SET state       = 'pending',
        run_at      = now(),
        lease_owner = NULL,
        lease_until = NULL,
        errors      = expired.errors
    FROM expired
    WHERE j.id = ANY (ARRAY[expired.id]) AND NOT expired.exhausted
    RETURNING j.id, j.queue, j.priority, j.run_at
), buried AS (
    INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt,
                                  max_attempts, unique_key, errors, reason, created_at, run_at, meta, concurrency_key)
    SELECT expired.id, expired.queue, expired.kind, expired.version, expired.payload, expired.priority, expired.attempt,
           expired.max_attempts, expired.unique_key, expired.errors, 'lease expired on last attempt', expired.created_at, expired.run_at,
           expired.meta, expired.concurrency_key
    FROM expired
    WHERE expired.exhausted
    RETURNING id, queue
), removed AS (
    DELETE FROM hopper_jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT buried.id FROM buried))
)
SELECT requeued.id, requeued.queue, requeued.priority, requeued.run_at, false AS dead FROM requeued
UNION ALL
SELECT buried.id, buried.queue, 0::smallint, now(), true AS dead FROM buried;
