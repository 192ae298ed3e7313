-- name: AckBatch :many
-- Deletes the completed jobs of the given claims (ids[i], attempts[i]) and
-- returns the claims it deleted; a claim missing from the answer was not
-- acked. Rows are locked in id order, as by every statement that waits for
-- row locks (NackBatch, Release), so two of them can never deadlock; the
-- statements that must never wait (Dequeue, Extend, Sweep, Promote) skip
-- locked rows instead.
WITH done AS (
    SELECT j.id
    FROM hopper_jobs AS j
    JOIN (SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt) AS acked
      ON j.id = acked.id AND j.attempt = acked.attempt
    -- running, spelled through the lease CHECK constraint (running means a
    -- lease): the planner then drives this statement from the given ids
    -- through the primary key, never from the partial lease index, whose row
    -- estimate can be badly stale after a burst of claims (it once chose a
    -- nested loop over every running job: 3.5 s for 1000 acks).
    WHERE j.lease_until IS NOT NULL
    ORDER BY j.id
    FOR UPDATE OF j
)
DELETE FROM hopper_jobs AS j
USING done
WHERE j.id = done.id
RETURNING j.id, j.attempt;

-- name: AckBatchKeep :many
-- AckBatch for claims of kinds or queues that keep their completed jobs:
-- the same fenced delete, and in the same statement a copy of each job
-- whose keep_ms[i] is positive goes to hopper_job_history, with the
-- handler's result[i] (NULL: none), kept until now() + keep_ms[i]. The
-- worker uses it only for batches that keep something, so with history
-- off the ack is AckBatch, unchanged. The copy is made from the rows the
-- statement locked (the very rows it deletes: nobody else can change them
-- meanwhile), not by joining the delete's answer back to the claims: a
-- generic plan joined those with a nested loop, 100 ms per 1000 acks.
WITH done AS (
    SELECT j.id, j.queue, j.kind, j.version, j.payload, j.priority, j.attempt, j.max_attempts,
           j.unique_key, j.errors, j.run_at, j.created_at, j.meta, j.concurrency_key, acked.keep_ms, acked.result
    FROM hopper_jobs AS j
    JOIN (SELECT unnest(@ids::bigint[]) AS id,
                 unnest(@attempts::integer[]) AS attempt,
                 unnest(@keep_ms::bigint[]) AS keep_ms,
                 unnest(@results::jsonb[]) AS result) AS acked
      ON j.id = acked.id AND j.attempt = acked.attempt
    WHERE j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
    ORDER BY j.id
    FOR UPDATE OF j
), deleted AS (
    DELETE FROM hopper_jobs AS j
    USING done
    WHERE j.id = done.id
    RETURNING j.id, j.attempt
), kept AS (
    INSERT INTO hopper_job_history (id, queue, kind, version, payload, priority, attempt,
                                    max_attempts, unique_key, errors, run_at, result, created_at, meta, concurrency_key, keep_until)
    SELECT done.id, done.queue, done.kind, done.version, done.payload, done.priority, done.attempt,
           done.max_attempts, done.unique_key, done.errors, done.run_at, done.result, done.created_at, done.meta, done.concurrency_key,
           now() + '1 millisecond'::interval * done.keep_ms
    FROM done
    WHERE done.keep_ms > 0
)
SELECT deleted.id, deleted.attempt FROM deleted;

-- name: NackBatch :many
-- Records results other than success for the given claims (ids[i],
-- attempts[i]); actions[i] says which:
--
--   retry   the attempt failed: {attempt, at, owner, error} is appended to
--           the job's error history and the job waits, scheduled, until
--           now() + backoffs_ms[i] (pending at once for no backoff); out of
--           attempts, it moves to hopper_dead_jobs ('out of attempts').
--   dead    a permanent failure: the entry is appended and the job moves
--           to hopper_dead_jobs with reasons[i].
--   cancel  the handler cancelled its own job: the entry is appended (so
--           the history says who cancelled it and why) and the job moves to
--           hopper_dead_jobs as cancelled, whatever attempts it had left.
--   snooze  not now: the job waits until now() + backoffs_ms[i] without
--           an entry and without being charged: max_attempts grows by one,
--           as attempt did at the claim (attempt is the fencing token and
--           never goes down).
--
-- Returns one row per claim that took effect; dead says whether it went to
-- hopper_dead_jobs (dead, cancelled, or out of attempts).
--
-- The dead table's rows are made from the rows the statement locked (the
-- very rows it deletes), not by joining the delete's answer back: a
-- generic plan joined those with a nested loop, 90 ms for 1000 dead jobs.
WITH failed AS (
    SELECT j.id, j.queue, j.kind, j.version, j.payload, j.priority, j.attempt, j.max_attempts,
           j.unique_key, j.created_at, j.run_at, j.meta, j.concurrency_key,
           CASE WHEN f.action = 'snooze' THEN j.errors
                ELSE j.errors || jsonb_build_array(jsonb_build_object(
                         'attempt', j.attempt,
                         'at', now(),
                         'owner', j.lease_owner,
                         'error', f.message))
           END AS errors,
           f.action,
           f.backoff_ms,
           CASE
               WHEN f.action = 'dead' THEN f.reason
               WHEN f.action = 'cancel' THEN 'cancelled'
               WHEN f.action = 'retry' AND j.attempt >= j.max_attempts THEN 'out of attempts'
           END AS dead_reason
    FROM hopper_jobs AS j
    JOIN (
        SELECT unnest(@ids::bigint[]) AS id,
               unnest(@attempts::integer[]) AS attempt,
               unnest(@actions::text[]) AS action,
               unnest(@messages::text[]) AS message,
               unnest(@backoffs_ms::bigint[]) AS backoff_ms,
               unnest(@reasons::text[]) AS reason
    ) AS f ON j.id = f.id AND j.attempt = f.attempt
    WHERE j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
    ORDER BY j.id -- lock order: see AckBatch
    FOR UPDATE OF j
), retried AS (
    UPDATE hopper_jobs AS j
    SET state        = CASE WHEN failed.backoff_ms > 0 THEN 'scheduled' ELSE 'pending' END,
        run_at       = now() + '1 millisecond'::interval * failed.backoff_ms,
        lease_owner  = NULL,
        lease_until  = NULL,
        errors       = failed.errors,
        max_attempts = j.max_attempts + CASE WHEN failed.action = 'snooze' THEN 1 ELSE 0 END
    FROM failed
    WHERE j.id = failed.id AND failed.dead_reason IS NULL
    RETURNING j.id, j.attempt
), removed AS (
    DELETE FROM hopper_jobs AS j
    USING failed
    WHERE j.id = failed.id AND failed.dead_reason IS NOT NULL
), buried AS (
    INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt,
                                  max_attempts, unique_key, errors, reason, created_at, run_at, state, meta, concurrency_key)
    SELECT failed.id, failed.queue, failed.kind, failed.version, failed.payload, failed.priority, failed.attempt,
           failed.max_attempts, failed.unique_key, failed.errors, failed.dead_reason, failed.created_at, failed.run_at,
           CASE WHEN failed.action = 'cancel' THEN 'cancelled' ELSE 'dead' END, failed.meta, failed.concurrency_key
    FROM failed
    WHERE failed.dead_reason IS NOT NULL
    RETURNING id, attempt
)
SELECT retried.id, retried.attempt, false AS dead FROM retried
UNION ALL
SELECT buried.id, buried.attempt, true AS dead FROM buried;
