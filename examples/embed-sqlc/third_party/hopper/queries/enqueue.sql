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
-- payload is {}, max_attempts 0 is 25 (the table's default); a NULL meta
-- or concurrency_key is none.
WITH inserted AS (
    INSERT INTO hopper_jobs (queue, kind, version, payload, priority, run_at, state, max_attempts, unique_key, meta, concurrency_key)
    VALUES (
        coalesce(nullif(@queue::text, ''), 'default'), @kind::text, coalesce(nullif(@version::integer, 0), 1),
        coalesce(@payload::jsonb, '{}'), @priority::smallint,
        greatest(@run_at::timestamptz, now() + '1 millisecond'::interval * @delay_ms::bigint),
        CASE WHEN greatest(@run_at::timestamptz, now() + '1 millisecond'::interval * @delay_ms::bigint) > now() THEN 'scheduled' ELSE 'pending' END,
        coalesce(nullif(@max_attempts::integer, 0), 25), sqlc.narg(unique_key)::text,
        sqlc.narg(meta)::jsonb, sqlc.narg(concurrency_key)::text
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

-- name: ReserveJobIDs :many
-- n ids for the jobs of a COPY batch, in ascending order, taken from the
-- job table's own identity sequence: COPY cannot say which ids it gave, so
-- the ids are chosen first and the batch's results name every job. The
-- sequence is looked up once (MATERIALIZED: else the look-up runs for every
-- id, and 5000 ids cost 25 ms instead of 3).
WITH seq AS MATERIALIZED (
    SELECT pg_get_serial_sequence('hopper_jobs', 'id')::regclass AS id
)
SELECT nextval(seq.id)::bigint AS id
FROM seq
CROSS JOIN generate_series(1, @n::integer);

-- name: EnqueueBatch :copyfrom
-- COPY for plain batches of jobs that are ready now (run_at defaults to now()
-- in the database), with ids from ReserveJobIDs (COPY writes the id given,
-- as INSERT's OVERRIDING SYSTEM VALUE would). meta: a JSON object, or NULL
-- for none; concurrency_key: NULL for none.
INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, max_attempts, meta, concurrency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: EnqueueBatchAt :copyfrom
-- COPY for plain batches with an explicit run_at per job, with ids from
-- ReserveJobIDs; the caller sets state to scheduled for a job due later,
-- pending otherwise. meta and concurrency_key as in EnqueueBatch.
INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, run_at, state, max_attempts, meta, concurrency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: EnqueueBatchPlain :many
-- A small plain batch (no unique keys) in one statement, one round trip,
-- where ReserveJobIDs and COPY would cost two (four with BEGIN and COMMIT
-- when ready and delayed jobs are mixed). It stores what the COPY path
-- stores: an empty state means a job ready now, stored pending with the
-- database's now() as run_at (the column's default under COPY); any other
-- state is stored as given, with run_at as given (the caller computes a
-- delayed job's run_at and state with its own clock, as for COPY); a job
-- of a sequence is stored waiting (its commit places it), with the
-- database's now() as run_at when the run_at given is the zero time
-- (0001-01-01, Go's zero time.Time), as given otherwise. Batches of
-- sequence jobs use this statement whatever their size. queue,
-- version, priority and max_attempts are stored as given; meta: a JSON
-- object, or NULL for none; an empty concurrency key means none. One
-- statement, so one wake-up per queue with ready jobs (the trigger), and
-- all or nothing without a transaction. The ids come from the identity in
-- the batch's order: one row per job, in that order.
WITH inserted AS (
    INSERT INTO hopper_jobs (queue, kind, version, payload, priority, run_at, state, max_attempts, meta, concurrency_key)
    SELECT b.queue, b.kind, b.version, b.payload, b.priority,
           CASE WHEN b.state = '' OR (b.state = 'waiting' AND b.run_at = '0001-01-01 00:00:00+00') THEN now() ELSE b.run_at END,
           coalesce(nullif(b.state, ''), 'pending'),
           b.max_attempts, b.meta, nullif(b.concurrency_key, '')
    FROM (
        SELECT unnest(@queues::text[]) AS queue,
               unnest(@kinds::text[]) AS kind,
               unnest(@versions::integer[]) AS version,
               unnest(@payloads::jsonb[]) AS payload,
               unnest(@priorities::smallint[]) AS priority,
               unnest(@run_ats::timestamptz[]) AS run_at,
               unnest(@states::text[]) AS state,
               unnest(@max_attempts::integer[]) AS max_attempts,
               unnest(@metas::jsonb[]) AS meta,
               unnest(@concurrency_keys::text[]) AS concurrency_key
    ) AS b
    RETURNING id
)
SELECT id FROM inserted ORDER BY id;

-- name: EnqueueBatchUnique :many
-- A batch in which some jobs carry unique keys (an empty key means none;
-- likewise an empty concurrency key).
-- Jobs whose key a live job (or an earlier job of the same batch) already
-- holds are skipped. One row per job of the batch, in its order: the new
-- job's id with inserted = true, or, for a skipped one, the id of the job
-- that holds its key (0 if that job committed after this statement began
-- and is not visible to it) with inserted = false. run_at and zero
-- values' defaults per job as in Enqueue.
WITH seq AS MATERIALIZED ( -- looked up once: see ReserveJobIDs
    SELECT pg_get_serial_sequence('hopper_jobs', 'id')::regclass AS id
), batch AS (
    SELECT b.*, nextval(seq.id) AS id
    FROM seq, (
        SELECT unnest(@queues::text[]) AS queue,
               unnest(@kinds::text[]) AS kind,
               unnest(@versions::integer[]) AS version,
               unnest(@payloads::jsonb[]) AS payload,
               unnest(@priorities::smallint[]) AS priority,
               unnest(@run_ats::timestamptz[]) AS run_at,
               unnest(@delays_ms::bigint[]) AS delay_ms,
               unnest(@max_attempts::integer[]) AS max_attempts,
               unnest(@unique_keys::text[]) AS unique_key,
               unnest(@metas::jsonb[]) AS meta,
               unnest(@concurrency_keys::text[]) AS concurrency_key
    ) AS b
), inserted AS (
    INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, run_at, state, max_attempts, unique_key, meta, concurrency_key)
    OVERRIDING SYSTEM VALUE
    SELECT b.id, coalesce(nullif(b.queue, ''), 'default'), b.kind, coalesce(nullif(b.version, 0), 1), coalesce(b.payload, '{}'), b.priority,
           greatest(b.run_at, now() + '1 millisecond'::interval * b.delay_ms),
           CASE WHEN greatest(b.run_at, now() + '1 millisecond'::interval * b.delay_ms) > now() THEN 'scheduled' ELSE 'pending' END,
           coalesce(nullif(b.max_attempts, 0), 25), nullif(b.unique_key, ''), b.meta,
           nullif(b.concurrency_key, '')
    FROM batch AS b
    ORDER BY b.id
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, unique_key
)
SELECT coalesce(ins.id, twin.id, live.id, 0)::bigint AS id,
       (ins.id IS NOT NULL)::boolean AS inserted
FROM batch
LEFT JOIN inserted AS ins ON ins.id = batch.id
LEFT JOIN LATERAL (SELECT min(i.id) AS id
                   FROM inserted AS i
                   WHERE ins.id IS NULL AND i.unique_key = nullif(batch.unique_key, '')) AS twin ON true
LEFT JOIN hopper_jobs AS live ON ins.id IS NULL AND twin.id IS NULL AND live.unique_key = nullif(batch.unique_key, '')
ORDER BY batch.id;

-- name: LockEnqueueKeys :exec
-- Serializes the enqueues of these unique keys (empty keys are skipped)
-- whose answer depends on more than the live job table: a unique period,
-- finished states, or replacing a waiting job (EnqueueUnique). It takes a
-- transaction-scoped advisory lock per key, on a 64-bit hash of the
-- schema-qualified job table (its oid: one per schema, and advisory locks
-- are per database) and the key, in hash order so that two batches never
-- deadlock on each other. It must run as its own statement before
-- EnqueueUnique, in the same transaction (a pipelined batch's implicit
-- one, or the caller's): in READ COMMITTED a statement's snapshot is taken
-- when it starts, so only a statement that starts after the lock is
-- granted sees the job the previous holder of the lock wrote, and may
-- replace it. The lock is released when the transaction ends, committed or
-- rolled back: a rolled-back enqueue frees its key. No table, no
-- migration, nothing to vacuum. ('hopper_jobs'::regclass fails on a schema
-- without Hopper's tables rather than locking nothing.)
--
-- The same statement takes the locks of sequence keys (sequence_keys,
-- hopper_sequence_lock_id): a job of a sequence is enqueued under its
-- key's lock, so that within a key ids follow commit order, and the
-- commit's placement (the trigger hopper_jobs_sequence_place) finds no
-- other enqueue of the key in flight. Both kinds of lock are taken in one
-- hash order.
SELECT count(pg_advisory_xact_lock(l.lock_id))
FROM (
    SELECT DISTINCT a.lock_id
    FROM (
        SELECT hashtextextended('hopper_jobs'::regclass::oid::text || ':' || k.key, 0) AS lock_id
        FROM unnest(@unique_keys::text[]) AS k(key)
        WHERE k.key <> ''
        UNION ALL
        SELECT hopper_sequence_lock_id(q.key)
        FROM unnest(@sequence_keys::text[]) AS q(key)
        WHERE q.key <> ''
    ) AS a
    ORDER BY 1
) AS l;

-- name: LockUniqueHolders :exec
-- Locks, in id order, the live jobs holding these unique keys (empty keys
-- are skipped): run after LockEnqueueKeys by a batch with replacing jobs,
-- before its EnqueueUnique statements, which may each lock a holder (to
-- replace a waiting one, to take the key from a running one) and hold it
-- until the batch's transaction ends. Taken in the batch's order, those
-- locks could deadlock with the worker's statements that wait for row
-- locks, which take them in id order (AckBatch, NackBatch, Release);
-- taken here first, in id order, they cannot. A running holder locked here
-- makes its acknowledgement wait for the batch's end.
SELECT count(*)
FROM (
    SELECT j.id
    FROM hopper_jobs AS j
    WHERE j.unique_key = ANY (@unique_keys::text[])
    ORDER BY j.id
    FOR UPDATE OF j
) AS locked;

-- name: EnqueueUnique :one
-- One job whose unique key is held by more than a live job, run after
-- LockEnqueueKeys in the same transaction (alone, it is exact only against
-- enqueues of live keys; see LockEnqueueKeys). Enqueue's parameters, plus:
-- states, the finished states whose jobs hold the key too ('completed',
-- 'dead', 'cancelled'; empty: live jobs only); period_ms, how recently such
-- a job must have been enqueued (created_at) to hold it (0: whenever, as
-- long as it is kept); replace, whether a waiting holder (pending,
-- scheduled, or waiting its turn in a sequence, where it keeps its place)
-- takes this job's payload and version; push_run_at, whether it
-- also takes this job's run time (a debounce); take_from_running, whether
-- a running holder gives up the key to this job, which is inserted (so
-- that the latest payload runs after the running job: replace with live
-- keys only). A live holder comes first, then the newest finished one.
-- outcome is 'inserted' (the new job's id), 'replaced' (the waiting
-- holder's id) or 'kept' (the holder's id: running, finished, or waiting
-- without replace; or a job that took the key after this statement's
-- snapshot, id 0 when it is not visible to it); with take_from_running,
-- 'raced' instead when the holder changed under the statement (claimed as
-- it was being replaced, or the key taken by an enqueue without the lock):
-- a kept no order of the enqueues explains, which the caller sends again.
-- The replace re-checks the
-- holder's state under its row lock, so a job claimed meanwhile is not
-- changed while it runs. Only a holder of the same kind is replaced or
-- gives up its key (another kind's payload would not decode): a holder of
-- another kind is kept; so is a waiting holder of another sequence key
-- (or of none, or one when this job has none): its payload would run in
-- that key's order, and its key is fixed at enqueue. A running holder that finished meanwhile has
-- freed the key: the job is inserted all the same. The insert reads the
-- count of taken keys first, so that the key is off the running holder
-- before the insert checks the unique index. A job without a key is simply
-- inserted.
-- The job's time and the statement's clock are read once, in clock, and
-- only compared inside the CASEs: Citus refuses a statement on a
-- distributed table that calls a function that is not immutable (now(),
-- or timestamptz + interval) inside CASE or COALESCE (docs/scaling-out.md).
WITH clock AS MATERIALIZED (
    SELECT now() AS now, greatest(@run_at::timestamptz, now() + '1 millisecond'::interval * @delay_ms::bigint) AS run_at
), holder AS MATERIALIZED (
    SELECT c.id, c.state, c.kind, c.sequence_key
    FROM (
        -- A job whose durable handler recorded anything has begun: it
        -- counts as running, never replaced (its records were made for
        -- its payload), and gives up its key as a running job does.
        SELECT j.id, CASE WHEN j.meta ? 'hopper.durable' THEN 'running' ELSE j.state END AS state,
               j.kind, j.meta ->> 'hopper.sequence' AS sequence_key, 0 AS rank
        FROM hopper_jobs AS j
        WHERE j.unique_key = sqlc.narg(unique_key)::text
        UNION ALL
        SELECT h.id, 'completed', h.kind, NULL, 1
        FROM hopper_job_history AS h
        WHERE h.unique_key = sqlc.narg(unique_key)::text
          AND 'completed' = ANY (@states::text[])
          AND (@period_ms::bigint = 0 OR h.created_at > now() - '1 millisecond'::interval * @period_ms::bigint)
        UNION ALL
        SELECT d.id, d.state, d.kind, NULL, 1
        FROM hopper_dead_jobs AS d
        WHERE d.unique_key = sqlc.narg(unique_key)::text
          AND d.state = ANY (@states::text[])
          AND (@period_ms::bigint = 0 OR d.created_at > now() - '1 millisecond'::interval * @period_ms::bigint)
        UNION ALL
        -- a job enqueued within the period that completed without a
        -- history row (hopper_unique_periods)
        SELECT r.job_id, 'completed', r.kind, NULL, 1
        FROM hopper_unique_periods AS r
        WHERE r.unique_key = sqlc.narg(unique_key)::text
          AND @period_ms::bigint > 0 AND 'completed' = ANY (@states::text[])
          AND r.created_at > now() - '1 millisecond'::interval * @period_ms::bigint
          AND NOT EXISTS (SELECT FROM hopper_jobs AS l WHERE l.id = r.job_id)
          AND NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = r.job_id)
    ) AS c
    ORDER BY c.rank, c.id DESC
    LIMIT 1
), blocking AS MATERIALIZED (
    -- the holder, unless it is a running job that gives up its key
    SELECT holder.id, holder.state, holder.kind,
           holder.kind = @kind::text AND holder.state IN ('pending', 'scheduled', 'waiting')
           AND holder.sequence_key IS NOT DISTINCT FROM (sqlc.narg(meta)::jsonb ->> 'hopper.sequence') AS replaceable
    FROM holder
    WHERE NOT (@take_from_running::boolean AND holder.state = 'running' AND holder.kind = @kind::text)
), replaced AS (
    UPDATE hopper_jobs AS j
    SET payload = coalesce(@payload::jsonb, '{}'),
        version = coalesce(nullif(@version::integer, 0), 1),
        run_at = CASE WHEN @push_run_at::boolean THEN clock.run_at ELSE j.run_at END,
        state = CASE WHEN NOT @push_run_at::boolean OR j.state = 'waiting' THEN j.state
                     WHEN clock.run_at > clock.now THEN 'scheduled'
                     ELSE 'pending' END
    FROM blocking, clock
    WHERE @replace::boolean AND blocking.replaceable
      AND j.id = blocking.id AND j.state IN ('pending', 'scheduled', 'waiting') AND j.kind = @kind::text
      AND NOT coalesce(j.meta ? 'hopper.durable', false) -- began under the lock: raced
      AND (j.meta ->> 'hopper.sequence') IS NOT DISTINCT FROM (sqlc.narg(meta)::jsonb ->> 'hopper.sequence')
    RETURNING j.id
), taken AS (
    UPDATE hopper_jobs AS j
    SET unique_key = NULL
    FROM holder
    WHERE @take_from_running::boolean AND holder.state = 'running' AND holder.kind = @kind::text
      AND j.id = holder.id
      -- running (as in AckBatch, no partial index's predicate, so a lookup
      -- by id), or begun (durable)
      AND (j.lease_until IS NOT NULL OR j.meta ? 'hopper.durable')
    RETURNING j.id
), inserted AS (
    INSERT INTO hopper_jobs (queue, kind, version, payload, priority, run_at, state, max_attempts, unique_key, meta, concurrency_key)
    SELECT coalesce(nullif(@queue::text, ''), 'default'), @kind::text, coalesce(nullif(@version::integer, 0), 1),
           coalesce(@payload::jsonb, '{}'), @priority::smallint,
           clock.run_at,
           CASE WHEN sqlc.narg(meta)::jsonb ? 'hopper.sequence' THEN 'waiting'
                WHEN clock.run_at > clock.now THEN 'scheduled' ELSE 'pending' END,
           coalesce(nullif(@max_attempts::integer, 0), 25), sqlc.narg(unique_key)::text,
           sqlc.narg(meta)::jsonb, sqlc.narg(concurrency_key)::text
    FROM (SELECT count(*) AS n FROM taken) AS t
    CROSS JOIN clock
    WHERE NOT EXISTS (SELECT FROM blocking)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, created_at
), recorded AS (
    -- With a period, the key's record outlives the job: it holds the key
    -- until the period ends even when no history row is kept.
    INSERT INTO hopper_unique_periods (unique_key, job_id, kind, created_at, expires_at)
    SELECT sqlc.narg(unique_key)::text, i.id, @kind::text, i.created_at,
           i.created_at + '1 millisecond'::interval * @period_ms::bigint
    FROM inserted AS i
    WHERE @period_ms::bigint > 0 AND 'completed' = ANY (@states::text[])
    ON CONFLICT (unique_key) DO UPDATE
    SET job_id = excluded.job_id, kind = excluded.kind, created_at = excluded.created_at, expires_at = excluded.expires_at
)
SELECT i.id, 'inserted'::text AS outcome FROM inserted AS i
UNION ALL
SELECT r.id, 'replaced'::text FROM replaced AS r
UNION ALL
SELECT blocking.id,
       CASE WHEN @take_from_running::boolean AND blocking.replaceable THEN 'raced' ELSE 'kept' END
FROM blocking
WHERE NOT EXISTS (SELECT FROM replaced)
UNION ALL
SELECT coalesce(max(live.id), 0), CASE WHEN @take_from_running::boolean THEN 'raced' ELSE 'kept' END
FROM hopper_jobs AS live
WHERE live.unique_key = sqlc.narg(unique_key)::text
HAVING sqlc.narg(unique_key)::text IS NOT NULL
   AND NOT EXISTS (SELECT FROM blocking) AND NOT EXISTS (SELECT FROM inserted);

-- name: EnqueueUniqueBatch :many
-- EnqueueUnique for many jobs in one statement, run after LockEnqueueKeys
-- (and LockUniqueHolders) in the same transaction: the arrays hold one job
-- each, as EnqueueUnique's parameters, with finished the comma-separated
-- finished states that hold its key, and an empty unique key for none. No
-- two jobs may share a key (the caller sends a batch's repeated keys in
-- later statements, in the batch's order): each job's holder is then found
-- (and replaced, or its key taken) independently of the others', and the
-- answer of each is EnqueueUnique's. One row per job, in the arrays'
-- order: id and outcome as in EnqueueUnique ('raced' included).
WITH seq AS MATERIALIZED ( -- looked up once: see ReserveJobIDs
    SELECT pg_get_serial_sequence('hopper_jobs', 'id')::regclass AS id
), batch AS MATERIALIZED (
    -- each job's time (due) and the statement's clock (now) read here and
    -- only compared in the CASEs below, as in EnqueueUnique (Citus)
    SELECT b.*, nextval(seq.id) AS new_id,
           greatest(b.run_at, now() + '1 millisecond'::interval * b.delay_ms) AS due, now() AS now
    FROM seq, (
        SELECT unnest(@queues::text[]) AS queue,
               unnest(@kinds::text[]) AS kind,
               unnest(@versions::integer[]) AS version,
               unnest(@payloads::jsonb[]) AS payload,
               unnest(@priorities::smallint[]) AS priority,
               unnest(@run_ats::timestamptz[]) AS run_at,
               unnest(@delays_ms::bigint[]) AS delay_ms,
               unnest(@max_attempts::integer[]) AS max_attempts,
               unnest(@unique_keys::text[]) AS unique_key,
               unnest(@metas::jsonb[]) AS meta,
               unnest(@concurrency_keys::text[]) AS concurrency_key,
               unnest(@finished::text[]) AS finished,
               unnest(@periods_ms::bigint[]) AS period_ms,
               unnest(@replaces::boolean[]) AS replace,
               unnest(@push_run_ats::boolean[]) AS push_run_at,
               unnest(@take_from_running::boolean[]) AS take_from_running
    ) AS b
), holder AS MATERIALIZED (
    SELECT b.new_id AS for_id, c.id, c.state, c.kind, c.sequence_key
    FROM batch AS b
    CROSS JOIN LATERAL (
        SELECT c.id, c.state, c.kind, c.sequence_key
        FROM (
            -- begun when its durable handler recorded anything: as in
            -- EnqueueUnique
            SELECT j.id, CASE WHEN j.meta ? 'hopper.durable' THEN 'running' ELSE j.state END AS state,
                   j.kind, j.meta ->> 'hopper.sequence' AS sequence_key, 0 AS rank
            FROM hopper_jobs AS j
            WHERE j.unique_key = nullif(b.unique_key, '')
            UNION ALL
            SELECT h.id, 'completed', h.kind, NULL, 1
            FROM hopper_job_history AS h
            WHERE h.unique_key = nullif(b.unique_key, '')
              AND 'completed' = ANY (string_to_array(b.finished, ','))
              AND (b.period_ms = 0 OR h.created_at > now() - '1 millisecond'::interval * b.period_ms)
            UNION ALL
            SELECT d.id, d.state, d.kind, NULL, 1
            FROM hopper_dead_jobs AS d
            WHERE d.unique_key = nullif(b.unique_key, '')
              AND d.state = ANY (string_to_array(b.finished, ','))
              AND (b.period_ms = 0 OR d.created_at > now() - '1 millisecond'::interval * b.period_ms)
            UNION ALL
            SELECT r.job_id, 'completed', r.kind, NULL, 1
            FROM hopper_unique_periods AS r
            WHERE r.unique_key = nullif(b.unique_key, '')
              AND b.period_ms > 0 AND 'completed' = ANY (string_to_array(b.finished, ','))
              AND r.created_at > now() - '1 millisecond'::interval * b.period_ms
              AND NOT EXISTS (SELECT FROM hopper_jobs AS l WHERE l.id = r.job_id)
              AND NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = r.job_id)
        ) AS c
        ORDER BY c.rank, c.id DESC
        LIMIT 1
    ) AS c
), blocking AS MATERIALIZED (
    SELECT h.for_id, h.id, h.state, h.kind,
           h.kind = b.kind AND h.state IN ('pending', 'scheduled', 'waiting')
           AND h.sequence_key IS NOT DISTINCT FROM (b.meta ->> 'hopper.sequence') AS replaceable
    FROM holder AS h
    JOIN batch AS b ON b.new_id = h.for_id
    WHERE NOT (b.take_from_running AND h.state = 'running' AND h.kind = b.kind)
), replaced AS (
    UPDATE hopper_jobs AS j
    SET payload = coalesce(b.payload, '{}'),
        version = coalesce(nullif(b.version, 0), 1),
        run_at = CASE WHEN b.push_run_at THEN b.due ELSE j.run_at END,
        state = CASE WHEN NOT b.push_run_at OR j.state = 'waiting' THEN j.state
                     WHEN b.due > b.now THEN 'scheduled'
                     ELSE 'pending' END
    FROM blocking AS k
    JOIN batch AS b ON b.new_id = k.for_id
    WHERE b.replace AND k.replaceable
      AND j.id = k.id AND j.state IN ('pending', 'scheduled', 'waiting') AND j.kind = b.kind
      AND NOT coalesce(j.meta ? 'hopper.durable', false) -- began under the lock: raced
      AND (j.meta ->> 'hopper.sequence') IS NOT DISTINCT FROM (b.meta ->> 'hopper.sequence')
    RETURNING k.for_id, j.id
), taken AS (
    UPDATE hopper_jobs AS j
    SET unique_key = NULL
    FROM holder AS h
    JOIN batch AS b ON b.new_id = h.for_id
    WHERE b.take_from_running AND h.state = 'running' AND h.kind = b.kind
      AND j.id = h.id
      AND (j.lease_until IS NOT NULL OR j.meta ? 'hopper.durable') -- running or begun, by id (see EnqueueUnique)
    RETURNING h.for_id
), inserted AS (
    INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, run_at, state, max_attempts, unique_key, meta, concurrency_key)
    OVERRIDING SYSTEM VALUE
    SELECT b.new_id, coalesce(nullif(b.queue, ''), 'default'), b.kind, coalesce(nullif(b.version, 0), 1),
           coalesce(b.payload, '{}'), b.priority,
           b.due,
           CASE WHEN b.meta ? 'hopper.sequence' THEN 'waiting'
                WHEN b.due > b.now THEN 'scheduled' ELSE 'pending' END,
           coalesce(nullif(b.max_attempts, 0), 25), nullif(b.unique_key, ''), b.meta,
           nullif(b.concurrency_key, '')
    FROM batch AS b
    CROSS JOIN (SELECT count(*) AS n FROM taken) AS t -- keys off running holders first
    WHERE NOT EXISTS (SELECT FROM blocking AS k WHERE k.for_id = b.new_id)
    ORDER BY b.new_id
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, created_at
), recorded AS (
    -- the key's record for its period, as in EnqueueUnique
    INSERT INTO hopper_unique_periods (unique_key, job_id, kind, created_at, expires_at)
    SELECT b.unique_key, i.id, b.kind, i.created_at, i.created_at + '1 millisecond'::interval * b.period_ms
    FROM inserted AS i
    JOIN batch AS b ON b.new_id = i.id
    WHERE b.period_ms > 0 AND b.unique_key <> '' AND 'completed' = ANY (string_to_array(b.finished, ','))
    ORDER BY b.unique_key
    ON CONFLICT (unique_key) DO UPDATE
    SET job_id = excluded.job_id, kind = excluded.kind, created_at = excluded.created_at, expires_at = excluded.expires_at
)
SELECT coalesce(i.id, r.id, k.id, live.id, 0)::bigint AS id,
       (CASE WHEN i.id IS NOT NULL THEN 'inserted'
             WHEN r.id IS NOT NULL THEN 'replaced'
             WHEN b.take_from_running AND (k.id IS NULL OR k.replaceable) THEN 'raced'
             ELSE 'kept' END)::text AS outcome
FROM batch AS b
LEFT JOIN inserted AS i ON i.id = b.new_id
LEFT JOIN replaced AS r ON r.for_id = b.new_id
LEFT JOIN blocking AS k ON k.for_id = b.new_id
LEFT JOIN hopper_jobs AS live ON i.id IS NULL AND r.id IS NULL AND k.id IS NULL
                             AND live.unique_key = nullif(b.unique_key, '')
ORDER BY b.new_id;
