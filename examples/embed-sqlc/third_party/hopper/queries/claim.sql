-- name: Dequeue :many
-- Claims up to max_jobs ready jobs of one queue, in priority, run_at, id
-- order, among the kinds the caller can run: kinds[i] up to payload version
-- max_versions[i]. A job of another kind, or with a newer payload version,
-- is left for a worker that understands it. SKIP LOCKED lets any number of
-- workers claim at once without waiting on each other and without ever
-- claiming the same job twice. Each claimed job becomes running, its attempt
-- grows by one (that new attempt fences every later ack, nack and extend),
-- and it is leased to owner for lease_ms.
WITH picked AS (
    SELECT j.id
    FROM hopper_jobs AS j
    WHERE j.state = 'pending'
      AND j.queue = @queue::text
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
FROM picked
WHERE j.id = picked.id
RETURNING j.*;

-- name: Promote :many
-- Makes up to max_jobs scheduled jobs whose run_at has come pending, and
-- returns how many per queue (the caller wakes those queues). Every worker
-- runs it on its poll interval; SKIP LOCKED makes that safe.
WITH due AS (
    SELECT j.id
    FROM hopper_jobs AS j
    WHERE j.state = 'scheduled'
      AND j.run_at <= now()
    ORDER BY j.run_at
    LIMIT @max_jobs::integer
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE hopper_jobs AS j
    SET state = 'pending'
    FROM due
    WHERE j.id = due.id
    RETURNING j.queue
)
SELECT promoted.queue, count(*) AS promoted
FROM promoted
GROUP BY promoted.queue;
