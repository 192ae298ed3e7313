-- name: Dequeue :many
-- Claims up to max_jobs ready jobs of one queue, in priority, run_at, id
-- order, among the kinds the caller can run: kinds[i] up to payload version
-- max_versions[i]. A job of another kind, or with a newer payload version,
-- is left for a worker that understands it. SKIP LOCKED lets any number of
-- workers claim at once without waiting on each other and without ever
-- claiming the same job twice. Each claimed job becomes running, its attempt
-- grows by one (that new attempt fences every later ack, nack and extend),
-- and it is leased to owner for lease_ms.
--
-- The scan starts after (after_priority, after_run_at, after_id): the
-- worker's cursor, just past the last job it claimed. Entries before it
-- belong to jobs already claimed; they stay in the index until vacuum can
-- remove them, which it cannot while any session holds an older snapshot,
-- and seeking past them keeps a claim's cost flat however many there are.
-- after_priority -1 scans from the start. Workers move the cursor back when
-- a wake-up names a job behind it, and scan from the start periodically.
--
-- A paused queue (hopper_queues.paused_at set) gives nothing: the check is
-- part of the claim, so a pause holds for every worker from the moment it
-- commits. It does not depend on the job rows, so PostgreSQL evaluates it
-- once, before the scan, and a paused queue's claim reads no index at all.
WITH picked AS (
    SELECT j.id
    FROM hopper_jobs AS j
    WHERE j.state = 'pending'
      AND j.queue = @queue::text
      AND NOT EXISTS (SELECT FROM hopper_queues AS paused
                      WHERE paused.name = @queue::text AND paused.paused_at IS NOT NULL)
      AND (j.priority, j.run_at, j.id) > (@after_priority::smallint, @after_run_at::timestamptz, @after_id::bigint)
      AND j.run_at <= now()
      -- array_position finds the slot of the kind; NULL (unknown kind) never passes.
      AND j.version <= (@max_versions::integer[])[array_position(@kinds::text[], j.kind)]
    ORDER BY j.priority, j.run_at, j.id
    LIMIT @max_jobs::integer
    FOR UPDATE SKIP LOCKED
)
UPDATE hopper_jobs AS j
SET state       = 'running',
    attempt     = j.attempt + 1,
    lease_owner = @owner::text,
    lease_until = now() + '1 millisecond'::interval * @lease_ms::bigint
-- An array of ids, not a join: a join lets a planner with stale statistics
-- (a table filled since its last ANALYZE) hash the whole table for a few
-- hundred rows; an id array is always read through the primary key.
WHERE j.id = ANY (ARRAY(SELECT picked.id FROM picked))
RETURNING j.*;

-- name: DequeueQueues :many
-- Dequeue for several queues in one statement: for each queue queues[i],
-- up to max_jobs[i] ready jobs from its own cursor (after_priorities[i],
-- after_run_ats[i], after_ids[i]) on, each queue's claim exactly as
-- Dequeue's (the same kinds and versions, order, pause check and SKIP
-- LOCKED), in a LATERAL subquery per queue. A worker with many queues
-- sends one of these for every queue that wants jobs at that moment,
-- instead of one Dequeue each: the round trips and the statement's fixed
-- cost are shared, so the cost per job does not grow as a worker's slots
-- are split over more queues. The jobs come back with their queue, for
-- the caller to hand to each queue's producer.
WITH picked AS (
    SELECT p.id
    FROM (SELECT unnest(@queues::text[]) AS queue,
                 unnest(@max_jobs::integer[]) AS max_jobs,
                 unnest(@after_priorities::smallint[]) AS after_priority,
                 unnest(@after_run_ats::timestamptz[]) AS after_run_at,
                 unnest(@after_ids::bigint[]) AS after_id) AS want
    CROSS JOIN LATERAL (
        SELECT j.id
        FROM hopper_jobs AS j
        WHERE j.state = 'pending'
          AND j.queue = want.queue
          AND NOT EXISTS (SELECT FROM hopper_queues AS paused
                          WHERE paused.name = want.queue AND paused.paused_at IS NOT NULL)
          AND (j.priority, j.run_at, j.id) > (want.after_priority, want.after_run_at, want.after_id)
          AND j.run_at <= now()
          AND j.version <= (@max_versions::integer[])[array_position(@kinds::text[], j.kind)]
        ORDER BY j.priority, j.run_at, j.id
        LIMIT want.max_jobs
        FOR UPDATE OF j SKIP LOCKED
    ) AS p
)
UPDATE hopper_jobs AS j
SET state       = 'running',
    attempt     = j.attempt + 1,
    lease_owner = @owner::text,
    lease_until = now() + '1 millisecond'::interval * @lease_ms::bigint
WHERE j.id = ANY (ARRAY(SELECT picked.id FROM picked))
RETURNING j.*;

-- name: Promote :many
-- Makes up to max_jobs scheduled jobs whose run_at has come pending, and
-- returns how many per queue with the smallest priority, run_at and id among
-- them (the caller wakes those queues and moves their cursors back there). Every worker
-- runs it on its poll interval; SKIP LOCKED makes that safe.
WITH due AS (
    SELECT j.id
    FROM hopper_jobs AS j
    WHERE j.state = 'scheduled'
      AND j.run_at <= now()
      -- Only jobs that fell due within the last within_ms (0: all), as in
      -- Sweep: the scheduled index's first entries belong to jobs promoted
      -- long ago, dead but kept while any older snapshot is open.
      AND j.run_at >= coalesce(now() - '1 millisecond'::interval * nullif(@within_ms::bigint, 0), '-infinity')
    ORDER BY j.run_at
    LIMIT @max_jobs::integer
    FOR UPDATE SKIP LOCKED
), promoted AS (
    -- by an array of ids, as in Dequeue: a join to due could be hashed
    -- against the whole table
    UPDATE hopper_jobs AS j
    SET state = 'pending'
    WHERE j.id = ANY (ARRAY(SELECT due.id FROM due))
    RETURNING j.queue, j.priority, j.run_at, j.id
)
SELECT promoted.queue,
       count(*) AS promoted,
       min(promoted.priority)::smallint AS priority,
       min(promoted.run_at)::timestamptz AS run_at,
       min(promoted.id)::bigint AS id
FROM promoted
GROUP BY promoted.queue;
