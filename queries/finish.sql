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

-- name: NackBatch :many
-- Records failed attempts of the given claims, appending
-- {attempt, at, owner, error} to the error history of each job. A job with
-- attempts left and an empty dead_reasons[i] waits, scheduled, until
-- now() + backoffs_ms[i] (pending at once for no backoff); any other moves to hopper_dead_jobs in this same
-- statement, with dead_reasons[i] or 'out of attempts' as its reason.
-- Returns one row per claim that took effect.
WITH failed AS (
    SELECT j.id,
           j.errors || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempt,
               'at', now(),
               'owner', j.lease_owner,
               'error', f.message)) AS errors,
           f.backoff_ms,
           CASE
               WHEN f.dead_reason <> '' THEN f.dead_reason
               WHEN j.attempt >= j.max_attempts THEN 'out of attempts'
           END AS dead_reason
    FROM hopper_jobs AS j
    JOIN (
        SELECT unnest(@ids::bigint[]) AS id,
               unnest(@attempts::integer[]) AS attempt,
               unnest(@messages::text[]) AS message,
               unnest(@backoffs_ms::bigint[]) AS backoff_ms,
               unnest(@dead_reasons::text[]) AS dead_reason
    ) AS f ON j.id = f.id AND j.attempt = f.attempt
    WHERE j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
    ORDER BY j.id -- lock order: see AckBatch
    FOR UPDATE OF j
), retried AS (
    UPDATE hopper_jobs AS j
    SET state       = CASE WHEN failed.backoff_ms > 0 THEN 'scheduled' ELSE 'pending' END,
        run_at      = now() + '1 millisecond'::interval * failed.backoff_ms,
        lease_owner = NULL,
        lease_until = NULL,
        errors      = failed.errors
    FROM failed
    WHERE j.id = failed.id AND failed.dead_reason IS NULL
    RETURNING j.id, j.attempt
), removed AS (
    DELETE FROM hopper_jobs AS j
    USING failed
    WHERE j.id = failed.id AND failed.dead_reason IS NOT NULL
    RETURNING j.*
), buried AS (
    INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt,
                                  max_attempts, unique_key, errors, reason, created_at)
    SELECT r.id, r.queue, r.kind, r.version, r.payload, r.priority, r.attempt,
           r.max_attempts, r.unique_key, failed.errors, failed.dead_reason, r.created_at
    FROM removed AS r
    JOIN failed ON failed.id = r.id
    RETURNING id, attempt
)
SELECT retried.id, retried.attempt, false AS dead FROM retried
UNION ALL
SELECT buried.id, buried.attempt, true AS dead FROM buried;
