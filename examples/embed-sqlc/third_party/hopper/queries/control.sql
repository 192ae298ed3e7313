-- name: Cancel :many
-- Cancels the given jobs, whatever their live state: each moves to
-- hopper_dead_jobs as cancelled (reason 'cancelled'), never dropped. A
-- running job's worker is told at once (a notification on hopper_jobs
-- naming the job and its attempt) and cancels its handler; its late result
-- is refused by the (id, attempt) fence, since the row is gone. Rows are
-- locked in id order, like every statement that waits for row locks. One
-- row per requested id says what the job was: pending, scheduled or
-- running (cancelled now: cancelled is true), dead, cancelled or completed
-- (finished already), or '' (no such job). The live parents of the
-- workflow steps among them are locked first (FOR KEY SHARE, in id order),
-- parents before children, as DeleteJob does and for the same reason: a
-- parent's end locks its waiting children after its own row. A parent
-- that is itself cancelled is not share-locked first: two cancels holding
-- its share lock could each wait for the other to upgrade it.
--
-- The jobs are copied to hopper_dead_jobs from the rows locked, and
-- deleted by the ids the copy returns: on Citus (docs/scaling-out.md),
-- where each part of the statement runs as a statement of its own, the
-- delete's triggers (sequences, workflows, durable jobs) then find them
-- cancelled, as on PostgreSQL, where they fire at the end of the
-- statement. The rows are found by an array of ids, not a join to
-- requested: Citus 13.2.2 fails a lock of rows joined to an earlier
-- part's answer whose rows an INSERT then reads ("PGCOPY", see RetryDead).
WITH requested AS (
    SELECT DISTINCT unnest(@ids::bigint[]) AS id
), parents AS (
    SELECT count(*) AS held
    FROM (SELECT p.id
          FROM hopper_jobs AS p
          WHERE p.id IN (SELECT d.parent_id FROM hopper_workflow_deps AS d WHERE d.child_id = ANY (@ids::bigint[]))
            AND NOT p.id = ANY (@ids::bigint[]) -- locked FOR UPDATE below, in the id order
          ORDER BY p.id
          FOR KEY SHARE OF p) AS l
), target AS (
    SELECT j.*
    FROM hopper_jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT requested.id FROM requested))
      AND (SELECT p.held FROM parents AS p) >= 0
    ORDER BY j.id
    FOR UPDATE OF j
), buried AS (
    INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts,
                                  unique_key, errors, reason, created_at, run_at, state, meta, concurrency_key)
    SELECT t.id, t.queue, t.kind, t.version, t.payload, t.priority, t.attempt, t.max_attempts,
           t.unique_key, t.errors, 'cancelled', t.created_at, t.run_at, 'cancelled', t.meta, t.concurrency_key
    FROM target AS t
    RETURNING id
), removed AS (
    DELETE FROM hopper_jobs AS j
    WHERE j.id = ANY (ARRAY(SELECT buried.id FROM buried))
    RETURNING j.id, j.state
), told AS (
    SELECT count(hopper_wake('hopper_jobs', json_build_object(
               'schema', home.nspname,
               'cancel', r.id,
               'attempt', r.attempt,
               'owner', r.lease_owner)::text)) AS sent
    FROM target AS r,
         (SELECT n.nspname
          FROM pg_catalog.pg_class AS c
          JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
          WHERE c.oid = to_regclass('hopper_jobs')) AS home
    WHERE r.state = 'running'
)
SELECT removed.id::bigint AS id, removed.state::text AS state, true AS cancelled
FROM removed
CROSS JOIN told -- evaluated, so the notifications are sent
UNION ALL
-- The rest, found with EXCEPT ALL (hashed or sorted, never a nested loop
-- over both, as a generic plan of a join could be).
SELECT other.id, coalesce(finished.state, '')::text, false
FROM (SELECT requested.id FROM requested EXCEPT ALL SELECT removed.id FROM removed) AS other
CROSS JOIN told
LEFT JOIN hopper_all_jobs AS finished ON finished.id = other.id
ORDER BY 1;

-- name: PurgeQueue :execrows
-- Deletes every pending and scheduled job of a queue, without a trace.
-- Running jobs are left to finish.
DELETE FROM hopper_jobs WHERE queue = @queue::text AND state <> 'running';

-- name: RetryDead :many
-- Moves dead (or cancelled) jobs back to the live table under their own
-- ids, ready now, with their error history kept and as many attempts again
-- as they had: max_attempts grows by what it was (up to the integer's
-- limit, 2147483647: a job enqueued with 2^30 attempts that used them all,
-- or one inserted by hand with more, would overflow it and fail the whole
-- page of the retry), and attempt, the fencing token, never goes down. It picks up to max_jobs jobs after after_id, in
-- id order, matching the filters: states (which of dead and cancelled),
-- ids (empty: any), kind, queue, died_before. A job whose unique key a
-- live job holds again stays dead: nothing is lost. A job of a sequence
-- comes back waiting, and its commit places it by its id: the head again
-- if it blocked its sequence (the block is lifted), else behind the head.
-- A workflow step with parents comes back waiting too, and the trigger on
-- insert counts its parents still live: it runs once they have ended (at
-- once when none is left), applying its policy again if one failed.
-- Revivals of one workflow take turns (migration 15,
-- hopper_workflow_lock_id): the page's workflows are locked, in name
-- order, before any of its rows, or two revivals of one workflow could
-- deadlock on each other's rows and parents. A row another transaction
-- holds is left to it. One row per job picked says whether it moved; the
-- caller goes on after the last id picked until a page picks none.
--
-- The insert reads the rows picked (and locked) alone: Citus deparses an
-- INSERT ... SELECT that reads a table of the shard wrongly (syntax
-- error, 42601). picked finds the page's rows by an array of their ids:
-- Citus 13.2.2 fails a lock of rows joined to an earlier part's answer
-- whose rows an INSERT then reads (invalid input syntax for type bigint:
-- "PGCOPY", the Citus bug that hopper.Client's cancel meets). The delete comes after the insert (it reads its answer):
-- on Citus, where each part of the statement runs as a statement of its
-- own, its triggers (durable records, workflow edges) then find the jobs
-- live again, as on PostgreSQL.
WITH page AS (
    SELECT d.id, d.meta ->> 'hopper.workflow' AS workflow
    FROM hopper_dead_jobs AS d
    WHERE d.id > @after_id::bigint
      AND d.state = ANY(@states::text[])
      AND (cardinality(@ids::bigint[]) = 0 OR d.id = ANY(@ids::bigint[]))
      AND (sqlc.narg(kind)::text IS NULL OR d.kind = sqlc.narg(kind)::text)
      AND (sqlc.narg(queue)::text IS NULL OR d.queue = sqlc.narg(queue)::text)
      AND (sqlc.narg(died_before)::timestamptz IS NULL OR d.died_at < sqlc.narg(died_before)::timestamptz)
    ORDER BY d.id
    LIMIT @max_jobs::integer
), turns AS (
    SELECT count(pg_advisory_xact_lock(hopper_workflow_lock_id(w.workflow))) AS taken
    FROM (SELECT DISTINCT p.workflow FROM page AS p WHERE p.workflow IS NOT NULL ORDER BY p.workflow) AS w
), picked AS MATERIALIZED (
    SELECT d.id, d.queue, d.kind, d.version, d.payload, d.priority, d.attempt,
           least(d.attempt::bigint + d.max_attempts, 2147483647)::integer AS max_attempts, d.unique_key, d.errors, d.created_at, d.meta,
           d.concurrency_key,
           CASE WHEN d.meta ? 'hopper.sequence' THEN 'waiting'
                WHEN d.meta ? 'hopper.workflow' AND EXISTS (SELECT FROM hopper_workflow_deps AS e WHERE e.child_id = d.id) THEN 'waiting'
                ELSE 'pending' END AS state
    FROM hopper_dead_jobs AS d
    WHERE (SELECT t.taken FROM turns AS t) >= 0
      AND d.id = ANY (ARRAY(SELECT page.id FROM page))
    ORDER BY d.id
    FOR UPDATE OF d SKIP LOCKED
), revived AS (
    INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, attempt,
                             max_attempts, unique_key, errors, created_at, meta, concurrency_key, state)
    OVERRIDING SYSTEM VALUE
    SELECT p.id, p.queue, p.kind, p.version, p.payload, p.priority, p.attempt,
           p.max_attempts, p.unique_key, p.errors, p.created_at, p.meta, p.concurrency_key, p.state
    FROM picked AS p
    ON CONFLICT DO NOTHING
    RETURNING id
), moved AS (
    DELETE FROM hopper_dead_jobs AS dead
    USING revived
    WHERE dead.id = revived.id
    RETURNING dead.id
)
SELECT moved.id, true AS retried
FROM moved
UNION ALL
SELECT kept.id, false -- EXCEPT ALL: see Cancel
FROM (SELECT picked.id FROM picked EXCEPT ALL SELECT moved.id FROM moved) AS kept
ORDER BY 1;

-- name: PurgeDead :many
-- Deletes up to max_jobs dead (or cancelled) jobs after after_id, in id
-- order, matching the filters of RetryDead, and returns their ids; the
-- caller goes on after the last until fewer come back. Workers run it for
-- their dead-job retention (died_before = now - retention); SKIP LOCKED
-- lets them all at once. The edges of a workflow step (to its parents)
-- go with it, through their child index.
WITH doomed AS (
    SELECT d.id
    FROM hopper_dead_jobs AS d
    WHERE d.id > @after_id::bigint
      AND d.state = ANY(@states::text[])
      AND (cardinality(@ids::bigint[]) = 0 OR d.id = ANY(@ids::bigint[]))
      AND (sqlc.narg(kind)::text IS NULL OR d.kind = sqlc.narg(kind)::text)
      AND (sqlc.narg(queue)::text IS NULL OR d.queue = sqlc.narg(queue)::text)
      AND (sqlc.narg(died_before)::timestamptz IS NULL OR d.died_at < sqlc.narg(died_before)::timestamptz)
    ORDER BY d.id
    LIMIT @max_jobs::integer
    FOR UPDATE SKIP LOCKED
), edges AS (
    DELETE FROM hopper_workflow_deps AS e
    WHERE e.child_id IN (SELECT doomed.id FROM doomed)
)
DELETE FROM hopper_dead_jobs AS dead
WHERE dead.id IN (SELECT doomed.id FROM doomed)
RETURNING dead.id;

-- name: PauseQueue :one
-- Pauses a queue: from this statement's commit no claim takes its jobs
-- (Dequeue checks hopper_queues). Pausing a paused queue changes nothing;
-- paused_at stays the time of the first pause, and was_paused says so.
-- before is MATERIALIZED: on Citus, where each part runs as a statement
-- of its own, an inlined before would read the queue after the upsert;
-- and its EXISTS selects a column, as Citus needs to read the part back.
WITH before AS MATERIALIZED (
    SELECT q.paused_at FROM hopper_queues AS q WHERE q.name = @name::text
), upserted AS (
    INSERT INTO hopper_queues (name, paused_at)
    VALUES (@name::text, now())
    ON CONFLICT (name) DO UPDATE
    SET paused_at  = coalesce(hopper_queues.paused_at, excluded.paused_at),
        -- excluded's paused_at is now(): Citus refuses a function in DO UPDATE SET.
        updated_at = CASE WHEN hopper_queues.paused_at IS NULL THEN excluded.paused_at ELSE hopper_queues.updated_at END
    RETURNING paused_at
)
SELECT upserted.paused_at::timestamptz AS paused_at,
       EXISTS (SELECT 1 FROM before WHERE before.paused_at IS NOT NULL)::boolean AS was_paused
FROM upserted;

-- name: ResumeQueue :one
-- Resumes a paused queue and wakes its workers at once (a wake-up without
-- a place: their cursors scan from the start). was_paused is false, and
-- nothing is sent, when the queue was not paused; paused_at is when it had
-- been paused (NULL if it was not). No row when hopper_queues has no such
-- queue.
WITH before AS (
    SELECT q.name, q.paused_at
    FROM hopper_queues AS q
    WHERE q.name = @name::text
    FOR UPDATE
), resumed AS (
    UPDATE hopper_queues AS q
    SET paused_at = NULL, updated_at = now()
    FROM before
    WHERE q.name = before.name AND before.paused_at IS NOT NULL
    RETURNING q.name
), woken AS (
    SELECT count(hopper_wake('hopper_jobs', json_build_object('schema', n.nspname, 'queue', resumed.name)::text)) AS sent
    FROM resumed,
         pg_catalog.pg_class AS c
         JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
    WHERE c.oid = to_regclass('hopper_jobs')
)
SELECT (before.paused_at IS NOT NULL)::boolean AS was_paused,
       before.paused_at AS paused_at
FROM before
CROSS JOIN woken;

-- name: RegisterQueues :exec
-- Records the queues a worker serves (at its start), so that they are known
-- to the operations that name a queue, with or without jobs. The names
-- are inserted in one order, sorted: two workers starting at once with
-- the same queues listed in other orders each waited for the other's
-- uncommitted row (the ON CONFLICT check), and one was aborted as a
-- deadlock, its start failing.
INSERT INTO hopper_queues (name)
SELECT q.name FROM unnest(@names::text[]) AS q(name)
ORDER BY q.name
ON CONFLICT (name) DO NOTHING;

-- name: ListQueues :many
-- Every queue Hopper knows of: those in hopper_queues (served by a worker,
-- or paused), and those that have live or dead jobs, with when each was
-- paused (NULL: not paused, which says nothing of whether any worker runs
-- it) and how many live workers serve it: workers whose row in
-- hopper_workers names the queue and was refreshed within its
-- stale_after_ms.
SELECT names.name::text AS name, q.paused_at, q.created_at, q.updated_at,
       coalesce(live.workers, 0)::integer AS workers
FROM (SELECT name FROM hopper_queues
      UNION
      SELECT DISTINCT queue FROM hopper_jobs
      UNION
      SELECT DISTINCT queue FROM hopper_dead_jobs) AS names
LEFT JOIN hopper_queues AS q ON q.name = names.name
LEFT JOIN (SELECT served.queue, count(*) AS workers
           FROM hopper_workers AS w
           CROSS JOIN LATERAL unnest(w.queues) AS served(queue)
           WHERE w.last_seen_at + '1 millisecond'::interval * w.stale_after_ms > now()
           GROUP BY served.queue) AS live ON live.queue = names.name
ORDER BY 1;

-- name: QueueKnown :one
-- Whether a queue is known: in hopper_queues, or holding a live or dead
-- job. The first two look-ups use indexes; the last resort (a queue that
-- has only scheduled or running jobs and no row) reads the live table.
SELECT (EXISTS (SELECT FROM hopper_queues WHERE name = @name::text)
        OR EXISTS (SELECT FROM hopper_jobs WHERE queue = @name::text AND state = 'pending')
        OR EXISTS (SELECT FROM hopper_dead_jobs WHERE queue = @name::text)
        OR EXISTS (SELECT FROM hopper_jobs WHERE queue = @name::text))::boolean AS known;
