-- name: Extend :many
-- Pushes the lease of each still-held claim (ids[i], attempts[i]) to at
-- least now() + lease_ms — never shortens it, so a longer extension asked
-- for by a handler (ExtendLease) survives the worker's lease extension —
-- and reports every claim still held. extended is false for a claim whose
-- row another transaction holds locked right now (an ack in flight, a
-- handler's own AckTx transaction): SKIP LOCKED means the lease extension never waits
-- on, and so never deadlocks with, any other statement; it tries again at
-- the next extension.
-- A claim missing from the answer has been lost (swept, claimed again or
-- acknowledged): a running handler must stop.
--
-- The claims not extended are found with EXCEPT ALL, which PostgreSQL
-- always hashes or sorts: a join of the update's answer back to the claims
-- was planned, once the plan was generic, as a nested loop over both
-- (1.5 s for an extension of 5000 claims).
--
-- Every row is found by primary key, whatever the statistics say: the
-- claims are looked up and locked one by one in a LATERAL subquery (see
-- AckBatch), the update finds the locked rows by an array of their ids,
-- and the claims not extended are looked up one by one too (OFFSET 0 keeps
-- that subquery out of the join, where the planner could hash it against
-- the whole table, as it did after an ANALYZE of an all-pending table).
WITH held AS (
    SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt
), locked AS (
    -- in any order: an extension skips locked rows, it never waits
    SELECT l.id
    FROM held
    CROSS JOIN LATERAL (
        SELECT j.id
        FROM hopper_jobs AS j
        WHERE j.id = held.id AND j.attempt = held.attempt
          AND j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
        FOR UPDATE OF j SKIP LOCKED
    ) AS l
), extended AS (
    UPDATE hopper_jobs AS j
    SET lease_until = greatest(j.lease_until, now() + '1 millisecond'::interval * @lease_ms::bigint)
    WHERE j.id = ANY (ARRAY(SELECT locked.id FROM locked))
    RETURNING j.id, j.attempt
)
SELECT extended.id, extended.attempt, true AS extended
FROM extended
UNION ALL
SELECT still.id, still.attempt, false AS extended
FROM (SELECT held.id, held.attempt FROM held
      EXCEPT ALL
      SELECT extended.id, extended.attempt FROM extended) AS skipped
CROSS JOIN LATERAL (
    SELECT j.id, j.attempt
    FROM hopper_jobs AS j
    WHERE j.id = skipped.id AND j.attempt = skipped.attempt
      AND j.lease_until IS NOT NULL
    OFFSET 0
) AS still;

-- name: Release :many
-- Gives claims back at once, for example on shutdown: the jobs become
-- pending again, keeping their place in line. The claim is not charged:
-- attempt stays as it is (it is the fencing token and never goes down) and
-- max_attempts grows by one, so the job keeps every retry it had; the
-- job's meta counts such claims ("hopper.uncharged"), so that attempts can
-- be shown as charged of allowed (jobs.Row.Attempts). A meta too near its
-- table's bound (8,704 bytes, 512 more than an enqueue may write) keeps no
-- count rather than fail the release. The count is written with
-- jsonb_object, which is immutable: Citus refuses jsonb_build_object (not
-- immutable) in a CASE of a write (docs/scaling-out.md). Rows are
-- locked in id order, like every statement that waits for row locks, and
-- looked up, locked and updated as in AckBatch (see there why).
WITH released AS (
    SELECT l.id
    FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt ORDER BY 1) AS held
    CROSS JOIN LATERAL (
        SELECT j.id
        FROM hopper_jobs AS j
        WHERE j.id = held.id AND j.attempt = held.attempt
          AND j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
        FOR UPDATE OF j
    ) AS l
)
UPDATE hopper_jobs AS j
SET state        = 'pending',
    lease_owner  = NULL,
    lease_until  = NULL,
    max_attempts = j.max_attempts + 1,
    meta         = CASE WHEN octet_length(coalesce(j.meta, '{}'::jsonb)::text) <= 8664
                        THEN coalesce(j.meta, '{}'::jsonb) || jsonb_object(ARRAY['hopper.uncharged',
                             (CASE WHEN j.meta ->> 'hopper.uncharged' ~ '^[0-9]{1,9}$'
                                   THEN (j.meta ->> 'hopper.uncharged')::integer ELSE 0 END + 1)::text])
                        ELSE j.meta END
WHERE j.id = ANY (ARRAY(SELECT released.id FROM released))
RETURNING j.id, j.queue, j.priority, j.run_at;

-- name: ClaimFates :many
-- What became of claims whose ack or nack may or may not have committed
-- (the reply was lost), or that the lease extension found gone: for each claim
-- (ids[i], attempts[i]), the job's live attempt and state if it is still
-- live, its attempt and state (dead or cancelled) if it is in the dead
-- table, its attempt if it completed into the history, and whether an
-- entry was recorded for this very attempt, and which. The worker decides
-- from these whether its statement took effect; it never guesses.
SELECT c.id::bigint AS id,
       c.attempt::integer AS attempt,
       j.attempt AS live_attempt,
       j.state AS live_state,
       d.attempt AS dead_attempt,
       d.state AS dead_state,
       h.attempt AS history_attempt,
       EXISTS (SELECT 1
               FROM jsonb_array_elements(coalesce(j.errors, d.errors)) AS e
               WHERE (e ->> 'attempt')::integer = c.attempt)::boolean AS attempt_recorded,
       coalesce((SELECT e ->> 'error'
                 FROM jsonb_array_elements(coalesce(j.errors, d.errors)) AS e
                 WHERE (e ->> 'attempt')::integer = c.attempt
                 LIMIT 1), '')::text AS attempt_error
FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt) AS c
-- One primary-key lookup per claim and table: `= ANY (ARRAY[c.id])` can
-- be neither hashed nor merged, so the planner cannot join the claims with
-- the three whole tables (it did, reading every live, dead and kept job
-- for a few claims); an index lookup per claim is the only plan left.
LEFT JOIN hopper_jobs AS j ON j.id = ANY (ARRAY[c.id])
LEFT JOIN hopper_dead_jobs AS d ON d.id = ANY (ARRAY[c.id])
LEFT JOIN hopper_job_history AS h ON h.id = ANY (ARRAY[c.id]);

-- name: OrphanClaims :many
-- The jobs a claim of queue for owner may have taken though its answer
-- never came (its commit's outcome unknown: the connection broke during
-- COMMIT, or Citus could not see a worker node's commit through): the
-- queue's running jobs leased to owner whose lease runs to at least
-- now() + lease_after_ms, which the worker sets to the claim's lease less
-- the time since it sent the claim (and a margin). A claim leases its jobs
-- until its own now() plus its lease, and its now() came after it was
-- sent; the jobs of claims made before, which the worker holds (and
-- extends) or let go (an abandoned handler, a result the server refused
-- in every form: their leases are no longer extended), mostly end sooner.
-- The worker runs at once those it does not hold, as if the claim had
-- answered, instead of leaving them to wait for their leases. Read only:
-- it runs only after such a failure, and reads the running jobs through
-- the lease index, those whose lease ends past the bound only.
SELECT j.*
FROM hopper_jobs AS j
WHERE j.state = 'running'
  AND j.lease_until >= now() + '1 millisecond'::interval * @lease_after_ms::bigint
  AND j.queue = @queue::text
  AND j.lease_owner = @owner::text
ORDER BY j.priority, j.run_at, j.id;
