-- name: Enqueue :one
-- Inserts one job and returns its id with inserted = true. When a live job
-- already holds unique_key, nothing is inserted and the id of that job comes back
-- with inserted = false. (If the holder committed after this statement's
-- snapshot was taken, no row comes back at all: still a duplicate.)
-- run_at is the later of run_at and now() + delay_ms, both measured by the
-- database clock; pass -infinity or any past time as run_at for "now". A
-- job due later is stored as scheduled.
-- Zero values take Hopper's defaults, so that a zero EnqueueParams with only
-- a kind is a valid job: queue '' is 'default', version 0 is 1, a NULL
-- payload is {}, max_attempts 0 is 25 (the table's default).
WITH inserted AS (
    INSERT INTO hopper_jobs (queue, kind, version, payload, priority, run_at, state, max_attempts, unique_key)
    VALUES (
        coalesce(nullif(@queue::text, ''), 'default'), @kind::text, coalesce(nullif(@version::integer, 0), 1),
        coalesce(@payload::jsonb, '{}'), @priority::smallint,
        greatest(@run_at::timestamptz, now() + '1 millisecond'::interval * @delay_ms::bigint),
        CASE WHEN greatest(@run_at::timestamptz, now() + '1 millisecond'::interval * @delay_ms::bigint) > now() THEN 'scheduled' ELSE 'pending' END,
        coalesce(nullif(@max_attempts::integer, 0), 25), sqlc.narg(unique_key)::text
    )
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT id, true AS inserted FROM inserted
UNION ALL
SELECT live.id, false AS inserted
FROM hopper_jobs AS live
WHERE live.unique_key = sqlc.narg(unique_key)::text
  AND NOT EXISTS (SELECT FROM inserted);

-- name: EnqueueBatch :copyfrom
-- COPY for plain batches of jobs that are ready now (run_at defaults to now()
-- in the database).
INSERT INTO hopper_jobs (queue, kind, version, payload, priority, max_attempts)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: EnqueueBatchAt :copyfrom
-- COPY for plain batches with an explicit run_at per job; the caller sets
-- state to scheduled for a job due later, pending otherwise.
INSERT INTO hopper_jobs (queue, kind, version, payload, priority, run_at, state, max_attempts)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8);

-- name: EnqueueBatchUnique :many
-- A batch in which some jobs carry unique keys (an empty key means none).
-- Jobs whose key a live job (or an earlier job of the same batch) already
-- holds are skipped; the ids and keys of the inserted jobs come back.
-- run_at and zero values' defaults per job as in Enqueue.
INSERT INTO hopper_jobs (queue, kind, version, payload, priority, run_at, state, max_attempts, unique_key)
SELECT coalesce(nullif(b.queue, ''), 'default'), b.kind, coalesce(nullif(b.version, 0), 1), coalesce(b.payload, '{}'), b.priority,
       greatest(b.run_at, now() + '1 millisecond'::interval * b.delay_ms),
       CASE WHEN greatest(b.run_at, now() + '1 millisecond'::interval * b.delay_ms) > now() THEN 'scheduled' ELSE 'pending' END,
       coalesce(nullif(b.max_attempts, 0), 25), nullif(b.unique_key, '')
FROM (
    SELECT unnest(@queues::text[]) AS queue,
           unnest(@kinds::text[]) AS kind,
           unnest(@versions::integer[]) AS version,
           unnest(@payloads::jsonb[]) AS payload,
           unnest(@priorities::smallint[]) AS priority,
           unnest(@run_ats::timestamptz[]) AS run_at,
           unnest(@delays_ms::bigint[]) AS delay_ms,
           unnest(@max_attempts::integer[]) AS max_attempts,
           unnest(@unique_keys::text[]) AS unique_key
) AS b
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id, coalesce(unique_key, '')::text AS unique_key;
