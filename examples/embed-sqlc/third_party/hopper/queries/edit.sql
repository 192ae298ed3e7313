-- Editing jobs that have not started: UpdateJob and DeleteJob change a
-- pending, scheduled or waiting job, and nothing else. Each is one statement that
-- locks the job's row only while it is pending, scheduled or waiting, and checks
-- that state under the lock: a claim that committed first leaves the job
-- running, which the lock's recheck sees, and the job is left alone; a
-- claim that comes later skips the locked row (SKIP LOCKED) and takes the
-- job as edited once the edit commits. No edit ever touches a running job,
-- nor locks one: a refused edit inside a long transaction never holds up
-- a worker's acknowledgement, beat or lease extension.
--
-- locked says whether the statement held the job. When it did not, was
-- is the job's state as the statement's snapshot saw it: running, a
-- finished state ('completed', 'dead', 'cancelled', from the other
-- tables), '' for no such job; or pending, scheduled or waiting, when the job
-- changed between the snapshot and the lock (a claim committed while the
-- statement waited for it): the caller runs the statement again, whose
-- new snapshot sees what became of the job.

-- name: UpdateJob :one
-- Changes a pending, scheduled or waiting job (a waiting job keeps waiting): every parameter left NULL keeps what
-- the job has.
--
--  * payload, with version (NULL: the job's own). With kind set (a typed
--    payload, made by the kind's Go definition) the job must be of that
--    kind. Without it (raw JSON from an operator) the payload must be of
--    the JSON type the job's payload has (an object stays an object), and
--    an explicit version may not be above the job's: every build of the
--    kind that can run the job as stored upgrades an older version, none
--    is known to read a newer one. Raw JSON in the clear may not replace
--    an encrypted payload (jobs.Encrypted: an object whose key is
--    'hopper.encrypted'): an operator without the key would store the
--    kind's data in the clear; the kind's Go definition encrypts.
--  * run_at: a time ahead of now() makes the job scheduled at it; any other
--    (now, the past, -infinity) makes it ready now, keeping its run_at if
--    it was due already, so that "run now" never sends a ready job back.
--    A scheduled job left past its run_at (not promoted yet) becomes
--    pending too.
--    With sequence_key set (the key the kind's SequenceBy derives from the
--    new payload, '' for none) it must be the job's own: the key is fixed
--    at enqueue, and a payload for another key would run in this one's
--    order.
--  * priority, queue, max_attempts. max_attempts must be more than the
--    attempts the job has made (attempt), so that it keeps one at least:
--    a pending job always has attempt < max_attempts.
--
-- The unique key and the concurrency key stay as they are: the unique
-- index spans all queues, so a moved job keeps holding its key, and a
-- moved keyed job counts against the key's limit in its new queue from
-- the commit (only running jobs count, and a running job is never
-- edited). The indexes follow the row as for any UPDATE: the ready, the
-- scheduled and the key index hold the job where it now stands.
--
-- A job pending after the edit whose place in claim order moved (queue,
-- priority, run_at, or pending only now) wakes its queue's workers with
-- that place, as Notify does, so that cursors past it move back.
--
-- A job whose durable handler recorded anything (steps, sleeps, waits,
-- progress: its meta has 'hopper.durable') keeps its payload, version and
-- kind: its records were made for them, and its next run replays them.
-- Its run time, priority, queue and max attempts may still change.
--
-- One row: was and locked (see above); refused is '' when the job was
-- changed or not held, else why a held job was not changed: 'durable',
-- 'kind', 'payload_type', 'encrypted', 'version', 'sequence' or
-- 'max_attempts'; job_kind,
-- job_version, payload_type, job_sequence and attempt are the held job's,
-- for the message; the other
-- columns are the job as changed (NULL when it was not).
-- The clock is read once, in clock, and only compared in the CASEs: see
-- EnqueueUnique (Citus).
WITH clock AS MATERIALIZED (
    SELECT now() AS now
), target AS (
    SELECT j.id, j.state, j.kind, j.version, j.attempt, j.queue, j.priority, j.run_at,
           jsonb_typeof(j.payload) AS payload_type, coalesce(j.meta ->> 'hopper.sequence', '') AS sequence_key,
           coalesce(j.meta ? 'hopper.durable', false) AS durable,
           coalesce(j.payload ? 'hopper.encrypted', false) AS encrypted
    FROM hopper_jobs AS j
    WHERE j.id = @id::bigint AND j.state IN ('pending', 'scheduled', 'waiting')
    FOR UPDATE
), verdict AS (
    SELECT t.id,
           CASE WHEN t.durable AND (sqlc.narg(payload)::jsonb IS NOT NULL OR sqlc.narg(version)::integer IS NOT NULL
                                    OR sqlc.narg(kind)::text IS NOT NULL) THEN 'durable'
                WHEN sqlc.narg(kind)::text IS NOT NULL AND t.kind <> sqlc.narg(kind)::text THEN 'kind'
                WHEN sqlc.narg(payload)::jsonb IS NOT NULL AND sqlc.narg(kind)::text IS NULL
                     AND jsonb_typeof(sqlc.narg(payload)::jsonb) <> t.payload_type THEN 'payload_type'
                WHEN sqlc.narg(payload)::jsonb IS NOT NULL AND sqlc.narg(kind)::text IS NULL AND t.encrypted
                     AND NOT coalesce(sqlc.narg(payload)::jsonb ? 'hopper.encrypted', false) THEN 'encrypted'
                WHEN sqlc.narg(version)::integer IS NOT NULL AND sqlc.narg(kind)::text IS NULL
                     AND sqlc.narg(version)::integer > t.version THEN 'version'
                WHEN sqlc.narg(sequence_key)::text IS NOT NULL AND sqlc.narg(sequence_key)::text <> t.sequence_key THEN 'sequence'
                WHEN sqlc.narg(max_attempts)::integer IS NOT NULL
                     AND sqlc.narg(max_attempts)::integer <= t.attempt THEN 'max_attempts'
                ELSE ''
           END AS refused,
           CASE WHEN sqlc.narg(run_at)::timestamptz IS NULL THEN t.run_at
                WHEN sqlc.narg(run_at)::timestamptz > clock.now THEN sqlc.narg(run_at)::timestamptz
                ELSE least(t.run_at, clock.now)
           END AS run_at,
           clock.now
    FROM target AS t, clock
), updated AS (
    UPDATE hopper_jobs AS j
    SET payload      = coalesce(sqlc.narg(payload)::jsonb, j.payload),
        version      = CASE WHEN sqlc.narg(payload)::jsonb IS NULL THEN j.version
                            ELSE coalesce(sqlc.narg(version)::integer, j.version) END,
        priority     = coalesce(sqlc.narg(priority)::smallint, j.priority),
        queue        = coalesce(sqlc.narg(queue)::text, j.queue),
        max_attempts = coalesce(sqlc.narg(max_attempts)::integer, j.max_attempts),
        run_at       = verdict.run_at,
        state        = CASE WHEN j.state = 'waiting' THEN 'waiting' -- its sequence's turn makes it ready
                            WHEN verdict.run_at > verdict.now THEN 'scheduled' ELSE 'pending' END
    FROM verdict -- read from the row locked: what the UPDATE sees
    WHERE j.id = verdict.id AND verdict.refused = ''
    RETURNING j.*
), woken AS (
    SELECT count(hopper_wake('hopper_jobs', json_build_object(
               'schema', home.nspname,
               'queue', u.queue,
               'priority', u.priority,
               'run_at', u.run_at,
               'id', u.id)::text)) AS sent
    FROM updated AS u
    JOIN target AS t ON t.id = u.id,
         (SELECT n.nspname
          FROM pg_catalog.pg_class AS c
          JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
          WHERE c.oid = to_regclass('hopper_jobs')) AS home
    WHERE u.state = 'pending'
      AND (t.state <> 'pending' OR t.queue <> u.queue OR t.priority <> u.priority OR t.run_at <> u.run_at)
)
SELECT coalesce((SELECT t.state FROM target AS t),
                (SELECT a.state FROM hopper_all_jobs AS a WHERE a.id = @id::bigint),
                '')::text AS was,
       EXISTS (SELECT FROM target)::boolean AS locked,
       coalesce((SELECT v.refused FROM verdict AS v), '')::text AS refused,
       coalesce((SELECT t.kind FROM target AS t), '')::text AS job_kind,
       coalesce((SELECT t.version FROM target AS t), 0)::integer AS job_version,
       coalesce((SELECT t.payload_type FROM target AS t), '')::text AS payload_type,
       coalesce((SELECT t.sequence_key FROM target AS t), '')::text AS job_sequence,
       coalesce((SELECT t.attempt FROM target AS t), 0)::integer AS attempt,
       u.id, u.queue, u.kind, u.version, u.payload, u.state, u.priority, u.run_at, u.attempt AS updated_attempt,
       u.max_attempts, u.lease_owner, u.lease_until, u.unique_key, u.errors, u.created_at, u.meta, u.concurrency_key
FROM woken
LEFT JOIN updated AS u ON true;

-- name: DeleteJob :one
-- Deletes a pending, scheduled or waiting job for good, without a trace (as
-- PurgeQueue does a queue's; Cancel keeps the job, as cancelled). A running
-- job is left to its worker. One row: was as in UpdateJob, deleted whether
-- the job is gone (the statement held it: locked in UpdateJob's terms),
-- and the other columns are the job as it was (NULL when it was not
-- deleted). A workflow step's live parents are locked first (FOR KEY
-- SHARE, in id order), before the step itself: a parent ending at the same
-- time locks its waiting children after its own row, so a statement that
-- locked the child first and then met a grandchild the parent's end had
-- locked would deadlock with it. Parents before children is the order
-- every statement takes.
WITH parents AS (
    SELECT count(*) AS held
    FROM (SELECT p.id
          FROM hopper_jobs AS p
          WHERE p.id IN (SELECT d.parent_id FROM hopper_workflow_deps AS d WHERE d.child_id = @id::bigint)
          ORDER BY p.id
          FOR KEY SHARE OF p) AS l
), target AS (
    SELECT j.id, j.state
    FROM hopper_jobs AS j
    WHERE j.id = @id::bigint AND j.state IN ('pending', 'scheduled', 'waiting')
      AND (SELECT p.held FROM parents AS p) >= 0
    FOR UPDATE
), deleted AS (
    DELETE FROM hopper_jobs AS j
    USING target
    WHERE j.id = target.id
    RETURNING j.*
)
SELECT coalesce((SELECT t.state FROM target AS t),
                (SELECT a.state FROM hopper_all_jobs AS a WHERE a.id = @id::bigint),
                '')::text AS was,
       (d.id IS NOT NULL)::boolean AS deleted,
       d.id, d.queue, d.kind, d.version, d.payload, d.state, d.priority, d.run_at, d.attempt,
       d.max_attempts, d.lease_owner, d.lease_until, d.unique_key, d.errors, d.created_at, d.meta, d.concurrency_key
FROM (SELECT 1) AS one
LEFT JOIN deleted AS d ON true;
