-- name: AckBatch :many
-- Deletes the completed jobs of the given claims (ids[i], attempts[i]) and
-- returns the claims it deleted; a claim missing from the answer was not
-- acked. Rows are locked in id order, as by every statement that waits for
-- row locks (NackBatch, Release), so two of them can never deadlock; the
-- statements that must never wait (Dequeue, Extend, Sweep, Promote) skip
-- locked rows instead.
--
-- The plan is fixed by the statement's shape, whatever the statistics say
-- (they are often wrong here: ANALYZE after a burst of enqueues sees no
-- running job, and the planner then expects no row to have a lease):
--
--  * Each claim is looked up on its own, by primary key, in a LATERAL
--    subquery that locks its row. A locking subquery is never merged into
--    the join, so the only plan is a loop over the claims with an index
--    lookup each: no hash of the table, no loop over its running jobs
--    (before, after an ANALYZE of an all-pending table, 1000 acks scanned
--    the table and compared every running job with every claim: 3-20 s on
--    a production server).
--  * The claims are sorted by id first: the loop, and so the locking, goes
--    in id order.
--  * The running test is lease_until IS NOT NULL, which the lease CHECK
--    constraint makes the same as state = 'running' but which matches no
--    partial index's predicate: it can only be a filter on the row found,
--    never a reason to read the lease index instead.
--  * The delete finds its rows by an array of ids (= ANY on the primary
--    key), not by a join to the locked rows, which the planner could hash
--    against the whole table.
WITH done AS (
    SELECT held.id
    FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt ORDER BY 1) AS acked
    CROSS JOIN LATERAL (
        SELECT j.id
        FROM hopper_jobs AS j
        WHERE j.id = acked.id AND j.attempt = acked.attempt
          AND j.lease_until IS NOT NULL -- running
        FOR UPDATE OF j
    ) AS held
)
DELETE FROM hopper_jobs AS j
WHERE j.id = ANY (ARRAY(SELECT done.id FROM done))
RETURNING j.id, j.attempt;

-- name: AckBatchKeep :many
-- AckBatch for claims of kinds or queues that keep their completed jobs:
-- the same fenced delete, and in the same statement a copy of each job
-- whose keep_ms[i] is positive goes to hopper_job_history, with the
-- handler's result[i] (NULL: none), kept until now() + keep_ms[i]. Its
-- drop_after, the history's partition key, is that time when one of the
-- partitions listed in hopper_history_partitions covers it and is no
-- wider than the keep, so that the row goes with that partition at most
-- one width (one keep) late. Otherwise it is NULL: the row goes to the
-- default partition, and PruneHistory deletes it when its keep ends. The
-- worker uses it only for batches that keep something, so with history
-- off the ack is AckBatch, unchanged. The copy is made from the rows the
-- statement locked (the very rows it deletes: nobody else can change them
-- meanwhile), not by joining the delete's answer back to the claims: a
-- generic plan joined those with a nested loop, 100 ms per 1000 acks.
-- Rows are looked up, locked and deleted as in AckBatch (see there why).
--
-- On Citus (docs/scaling-out.md) each part of the statement runs as a
-- statement of its own, in the order their references demand. So the
-- copies are made first (placed: each row with its keep and partition,
-- read beside hopper_history_partitions), and the insert reads placed
-- alone, without a join:
-- Citus deparses an INSERT ... SELECT that reads a table of the shard
-- wrongly (syntax error, 42601). And the delete takes the kept jobs' ids
-- from the insert's answer, so that the copies are in the history when
-- the delete's triggers fire (a kept workflow step keeps the edges to its
-- parents), as on PostgreSQL, where they fire at the end of the statement.
WITH done AS (
    SELECT j.id, j.queue, j.kind, j.version, j.payload, j.priority, j.attempt, j.max_attempts,
           j.unique_key, j.errors, j.run_at, j.created_at, j.meta, j.concurrency_key, acked.keep_ms, acked.result
    FROM (SELECT unnest(@ids::bigint[]) AS id,
                 unnest(@attempts::integer[]) AS attempt,
                 unnest(@keep_ms::bigint[]) AS keep_ms,
                 unnest(@results::jsonb[]) AS result
          ORDER BY 1) AS acked
    CROSS JOIN LATERAL (
        SELECT j.id, j.queue, j.kind, j.version, j.payload, j.priority, j.attempt, j.max_attempts,
               j.unique_key, j.errors, j.run_at, j.created_at, j.meta, j.concurrency_key
        FROM hopper_jobs AS j
        WHERE j.id = acked.id AND j.attempt = acked.attempt
          AND j.lease_until IS NOT NULL -- running
        FOR UPDATE OF j
    ) AS j
), placed AS MATERIALIZED (
    SELECT done.id, done.queue, done.kind, done.version, done.payload, done.priority, done.attempt,
           done.max_attempts, done.unique_key, done.errors, done.run_at, done.result, done.created_at, done.meta, done.concurrency_key,
           kept.until,
           CASE WHEN part.upper_at > kept.until AND part.upper_at - part.lower_at <= kept.keep THEN kept.until END AS drop_after
    FROM done
    CROSS JOIN LATERAL (SELECT '1 millisecond'::interval * done.keep_ms AS keep,
                               now() + '1 millisecond'::interval * done.keep_ms AS until) AS kept
    LEFT JOIN LATERAL (SELECT p.lower_at, p.upper_at
                       FROM hopper_history_partitions AS p
                       WHERE p.lower_at <= kept.until
                       ORDER BY p.lower_at DESC
                       LIMIT 1) AS part ON true
    WHERE done.keep_ms > 0
), kept AS (
    INSERT INTO hopper_job_history (id, queue, kind, version, payload, priority, attempt,
                                    max_attempts, unique_key, errors, run_at, result, created_at, meta, concurrency_key, keep_until,
                                    drop_after)
    SELECT placed.id, placed.queue, placed.kind, placed.version, placed.payload, placed.priority, placed.attempt,
           placed.max_attempts, placed.unique_key, placed.errors, placed.run_at, placed.result, placed.created_at, placed.meta,
           placed.concurrency_key, placed.until, placed.drop_after
    FROM placed
    RETURNING id
), deleted AS (
    DELETE FROM hopper_jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT done.id FROM done WHERE done.keep_ms > 0 IS NOT TRUE
                            UNION ALL
                            SELECT kept.id FROM kept))
    RETURNING j.id, j.attempt
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
--
-- Rows are looked up and locked as in AckBatch (see there why), and the
-- dead jobs deleted by an array of their ids, read from buried's answer:
-- on Citus each part of the statement runs as a statement of its own, in
-- the order their references demand, and the triggers of the delete
-- (sequences, workflows, durable jobs) fire at its end and must find the
-- jobs dead, as they do on PostgreSQL, where they fire at the end of the
-- whole statement (docs/scaling-out.md). The retried jobs need their
-- claim's new values, so their update joins the locked rows, written as
-- j.id = ANY (ARRAY[failed.id]): the same test as j.id = failed.id, but
-- one PostgreSQL can neither hash nor merge, so the only plan left looks
-- each retried job up by its primary key (an equality would let it hash
-- the whole table when it expects many failures).
--
-- The statement's clock is read once, in clock; the retry's time, the
-- error entry and a snooze's metadata are computed for every locked row,
-- outside the CASEs that choose them: Citus refuses a write that calls a
-- function that is not immutable (now(), timestamptz + interval,
-- jsonb_build_object) inside a CASE, or in an UPDATE's SET list with a
-- column in its arguments (docs/scaling-out.md).
WITH clock AS MATERIALIZED (
    SELECT now() AS now
), failed AS (
    SELECT j.id, j.queue, j.kind, j.version, j.payload, j.priority, j.attempt, j.max_attempts,
           j.unique_key, j.created_at, j.run_at, j.meta, j.concurrency_key,
           CASE WHEN f.action = 'snooze' THEN j.errors ELSE j.errors || j.entry END AS errors,
           j.snoozed_meta,
           f.action,
           f.backoff_ms,
           j.now + '1 millisecond'::interval * f.backoff_ms AS retry_at,
           CASE
               WHEN f.action = 'dead' THEN f.reason
               WHEN f.action = 'cancel' THEN 'cancelled'
               WHEN f.action = 'retry' AND j.attempt >= j.max_attempts THEN 'out of attempts'
           END AS dead_reason
    FROM (
        SELECT unnest(@ids::bigint[]) AS id,
               unnest(@attempts::integer[]) AS attempt,
               unnest(@actions::text[]) AS action,
               unnest(@messages::text[]) AS message,
               unnest(@backoffs_ms::bigint[]) AS backoff_ms,
               unnest(@reasons::text[]) AS reason
        ORDER BY 1) AS f -- lock order: see AckBatch
    CROSS JOIN LATERAL (
        SELECT j.id, j.queue, j.kind, j.version, j.payload, j.priority, j.attempt, j.max_attempts,
               j.unique_key, j.created_at, j.run_at, j.meta, j.concurrency_key, j.errors, j.lease_owner,
               clock.now,
               -- built for every row, used as the CASEs above and below say
               jsonb_build_array(jsonb_build_object(
                   'attempt', j.attempt,
                   'at', clock.now,
                   'owner', j.lease_owner,
                   'error', f.message)) AS entry,
               -- a snooze is a claim given back uncharged: counted as Release does
               coalesce(j.meta, '{}'::jsonb) || jsonb_build_object('hopper.uncharged',
                   (CASE WHEN j.meta ->> 'hopper.uncharged' ~ '^[0-9]{1,9}$'
                         THEN (j.meta ->> 'hopper.uncharged')::integer ELSE 0 END + 1)::text) AS snoozed_meta
        FROM hopper_jobs AS j
        CROSS JOIN clock
        WHERE j.id = f.id AND j.attempt = f.attempt
          AND j.lease_until IS NOT NULL -- running
        FOR UPDATE OF j
    ) AS j
), retried AS (
    UPDATE hopper_jobs AS j
    SET state        = CASE WHEN failed.backoff_ms > 0 THEN 'scheduled' ELSE 'pending' END,
        run_at       = failed.retry_at,
        lease_owner  = NULL,
        lease_until  = NULL,
        errors       = failed.errors,
        max_attempts = j.max_attempts + CASE WHEN failed.action = 'snooze' THEN 1 ELSE 0 END,
        -- a snooze is a claim given back uncharged (failed.snoozed_meta)
        meta         = CASE WHEN failed.action = 'snooze' AND octet_length(coalesce(j.meta, '{}'::jsonb)::text) <= 8664
                            THEN failed.snoozed_meta ELSE j.meta END
    FROM failed
    WHERE j.id = ANY (ARRAY[failed.id]) AND failed.dead_reason IS NULL
    RETURNING j.id, j.attempt
), buried AS (
    INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt,
                                  max_attempts, unique_key, errors, reason, created_at, run_at, state, meta, concurrency_key)
    SELECT failed.id, failed.queue, failed.kind, failed.version, failed.payload, failed.priority, failed.attempt,
           failed.max_attempts, failed.unique_key, failed.errors, failed.dead_reason, failed.created_at, failed.run_at,
           CASE WHEN failed.action = 'cancel' THEN 'cancelled' ELSE 'dead' END, failed.meta, failed.concurrency_key
    FROM failed
    WHERE failed.dead_reason IS NOT NULL
    RETURNING id, attempt
), removed AS (
    DELETE FROM hopper_jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT buried.id FROM buried))
)
SELECT retried.id, retried.attempt, false AS dead FROM retried
UNION ALL
SELECT buried.id, buried.attempt, true AS dead FROM buried;
