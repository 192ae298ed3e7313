-- name: ListSteps :many
-- The records of a durable job, in call order (worker.Step and the rest;
-- hopper.Client.ListJobSteps). remaining_ms is how long a sleep or a wait
-- has to go by the server's clock, the one its deadline is compared with
-- everywhere else: the worker counts it down on its own monotonic clock,
-- so that a worker whose wall clock is off neither wakes early and loops
-- nor wakes late.
SELECT s.position, s.name, s.kind, s.state, s.result, s.until, s.created_at,
       (CASE WHEN s.until IS NULL THEN 0
             ELSE greatest(0, ceil(extract(epoch FROM s.until - now()) * 1000)) END)::bigint AS remaining_ms
FROM hopper_job_steps AS s
WHERE s.job_id = @job_id::bigint
ORDER BY s.position;

-- name: RecordStep :one
-- Records a durable handler's call at its position, fenced by the claim
-- (job_id, attempt): nothing is written for a claim no longer held, and
-- held says so. The first record marks the job 'hopper.durable', so that
-- its records go when it does (hopper_durable_ended). A record already at
-- that position fails the statement with a unique violation (23505): in a
-- transactional step that rolls the step's effects back, which is what
-- makes it exact; elsewhere the caller reads the record that won. A sleep
-- or a wait gets its deadline from until (an absolute time, SleepUntil)
-- or wait_ms from the server's now() (Sleep, AwaitEvent): the server's
-- clock is the one it is compared with; until and remaining_ms (as in
-- ListSteps) come back.
WITH held AS (
    SELECT j.id, coalesce(j.meta ? 'hopper.durable', false) AS marked
    FROM hopper_jobs AS j
    WHERE j.id = @job_id::bigint AND j.attempt = @attempt::integer
      AND j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
), marked AS (
    UPDATE hopper_jobs AS j
    SET meta = coalesce(j.meta, '{}'::jsonb) || '{"hopper.durable": true}'::jsonb
    FROM held
    WHERE j.id = held.id AND NOT held.marked
), recorded AS (
    INSERT INTO hopper_job_steps (job_id, position, name, kind, state, result, until)
    SELECT held.id, @position::integer, @name::text, @kind::text, @state::text,
           sqlc.narg('result')::jsonb,
           coalesce(sqlc.narg('until')::timestamptz, now() + '1 millisecond'::interval * sqlc.narg('wait_ms')::bigint)
    FROM held
    RETURNING job_id, until
)
SELECT EXISTS (SELECT FROM held) AS held, EXISTS (SELECT FROM recorded) AS recorded,
       (SELECT r.until FROM recorded AS r) AS until,
       coalesce((SELECT greatest(0, ceil(extract(epoch FROM r.until - now()) * 1000)) FROM recorded AS r), 0)::bigint AS remaining_ms;

-- name: SettleEvent :one
-- Ends the wait of an event step once the event came in time (done, with
-- its payload) or the deadline passed (timed_out); a wait that goes on
-- returns no row. Fenced by the claim, as RecordStep. The event came in
-- time when it was emitted by the deadline, or when an emit woke the job
-- before it (the job is due before its deadline: an emit sets run_at to
-- its now(), a deadline's wake-up is never earlier than the deadline)
-- and the name was emitted again since, whose payload it receives. An
-- event emitted after the deadline does not count, even when the job runs
-- only after it (a backlog): the wait timed out.
WITH ev AS (
    SELECT e.payload, e.emitted_at FROM hopper_events AS e
    WHERE e.name = @name::text AND e.emitted_at IS NOT NULL
), held AS (
    SELECT j.run_at FROM hopper_jobs AS j
    WHERE j.id = @job_id::bigint AND j.attempt = @attempt::integer AND j.lease_until IS NOT NULL
)
UPDATE hopper_job_steps AS s
SET state  = CASE WHEN EXISTS (SELECT FROM ev, held WHERE ev.emitted_at <= s.until OR held.run_at < s.until)
                  THEN 'done' ELSE 'timed_out' END,
    result = (SELECT ev.payload FROM ev, held WHERE ev.emitted_at <= s.until OR held.run_at < s.until)
WHERE s.job_id = @job_id::bigint AND s.position = @position::integer
  AND s.kind = 'event' AND s.state = 'waiting'
  AND EXISTS (SELECT FROM held)
  AND (EXISTS (SELECT FROM ev, held WHERE ev.emitted_at <= s.until OR held.run_at < s.until) OR s.until <= now())
RETURNING s.state, s.result;

-- name: SuspendForEvents :many
-- Gives back claims whose handlers wait for an event (ids[i], attempts[i],
-- events[i]) until their deadline, now() + waits_ms[i], uncharged as a
-- snooze is (NackBatch): or at once, pending, when the event was emitted
-- meanwhile. Returns the claims it took, woken when pending at once.
--
-- The race with an emit is closed by the event's row: this statement
-- writes it (a mark with emitted_at NULL when there is none yet), and so
-- does hopper_emit_event. Whichever comes second waits for the first to
-- commit and then reads its row as committed: a suspension that comes
-- second sees the event emitted and wakes its job; an emit that comes
-- second finds the job scheduled and wakes it. Job rows are locked in id
-- order, then event rows in name order, as every statement that writes
-- both does, so two of them cannot deadlock; an emit locks job rows only
-- once they are scheduled, which no suspension waits for.
WITH claims AS (
    SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt,
           unnest(@events::text[]) AS event, unnest(@waits_ms::bigint[]) AS wait_ms
    ORDER BY 1
), held AS (
    SELECT l.id, l.meta, claims.event, claims.wait_ms
    FROM claims
    CROSS JOIN LATERAL (
        SELECT j.id, j.meta
        FROM hopper_jobs AS j
        WHERE j.id = claims.id AND j.attempt = claims.attempt
          AND j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
        FOR UPDATE OF j
    ) AS l
), marks AS (
    INSERT INTO hopper_events AS e (name)
    SELECT DISTINCT held.event FROM held ORDER BY 1
    ON CONFLICT ON CONSTRAINT hopper_events_pkey DO UPDATE SET name = EXCLUDED.name
    RETURNING e.name, e.emitted_at IS NOT NULL AS emitted
), given AS (
    SELECT held.id, held.meta, held.wait_ms, marks.emitted
    FROM held JOIN marks ON marks.name = held.event
)
UPDATE hopper_jobs AS j
SET state        = CASE WHEN given.emitted THEN 'pending' ELSE 'scheduled' END,
    run_at       = now() + CASE WHEN given.emitted THEN '0'::interval
                                ELSE '1 millisecond'::interval * given.wait_ms END,
    lease_owner  = NULL,
    lease_until  = NULL,
    max_attempts = j.max_attempts + 1,
    -- uncharged, counted as a snooze is (NackBatch); jsonb_object, which
    -- is immutable: Citus refuses jsonb_build_object (stable) in a CASE
    meta         = CASE WHEN octet_length(coalesce(j.meta, '{}'::jsonb)::text) <= 8664
                        THEN coalesce(j.meta, '{}'::jsonb) || jsonb_object(ARRAY['hopper.uncharged',
                             (CASE WHEN j.meta ->> 'hopper.uncharged' ~ '^[0-9]{1,9}$'
                                   THEN (j.meta ->> 'hopper.uncharged')::integer ELSE 0 END + 1)::text])
                        ELSE j.meta END
FROM given
WHERE j.id = ANY (ARRAY[given.id])
RETURNING j.id, j.attempt, given.emitted::boolean AS woken;

-- name: SetProgress :one
-- Records a running job's progress, fenced by the claim; held says whether
-- the claim is still this worker's. The job's row is locked first: a
-- progress written (late, by the throttle's timer) while the job's
-- acknowledgement deletes it either finds the row gone and writes nothing,
-- or makes the delete wait, whose trigger then deletes the progress with
-- the job. Unlocked, the write could land after that trigger and outlive
-- its job.
WITH held AS (
    SELECT j.id, coalesce(j.meta ? 'hopper.durable', false) AS marked
    FROM hopper_jobs AS j
    WHERE j.id = @job_id::bigint AND j.attempt = @attempt::integer
      AND j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
    FOR NO KEY UPDATE
), marked AS (
    UPDATE hopper_jobs AS j
    SET meta = coalesce(j.meta, '{}'::jsonb) || '{"hopper.durable": true}'::jsonb
    FROM held
    WHERE j.id = held.id AND NOT held.marked
), saved AS (
    INSERT INTO hopper_job_progress AS p (job_id, progress)
    SELECT held.id, @progress::jsonb FROM held
    -- updated_at is excluded's, the default now(): Citus refuses a function in DO UPDATE SET.
    ON CONFLICT (job_id) DO UPDATE SET progress = EXCLUDED.progress, updated_at = EXCLUDED.updated_at
    RETURNING p.job_id
)
SELECT EXISTS (SELECT FROM saved) AS held;

-- name: GetProgress :one
-- A job's last recorded progress (recorded false: none), and a row only
-- when the job exists, live, dead or kept in the history: a job that
-- recorded no progress is not a job that is not there.
SELECT (p.job_id IS NOT NULL)::boolean AS recorded,
       coalesce(p.progress, 'null'::jsonb)::jsonb AS progress,
       coalesce(p.updated_at, 'epoch'::timestamptz)::timestamptz AS updated_at
FROM (SELECT @job_id::bigint AS id) AS k
LEFT JOIN hopper_job_progress AS p ON p.job_id = k.id
WHERE p.job_id IS NOT NULL
   OR EXISTS (SELECT FROM hopper_jobs AS j WHERE j.id = k.id)
   OR EXISTS (SELECT FROM hopper_dead_jobs AS d WHERE d.id = k.id)
   OR EXISTS (SELECT FROM hopper_job_history AS h WHERE h.id = k.id);

-- name: EmitEvent :one
-- See hopper_emit_event (schema/000018_durable.up.sql).
SELECT hopper_emit_event(@name::text, @payload::jsonb)::integer AS woken;

-- name: WakeJob :one
-- An operator ends the wait of a sleeping or waiting job now: its sleep
-- is over, or its wait for an event times out (the handler sees
-- worker.ErrEventTimeout), and the job is pending at once. Returns the
-- job's queue and the kind of wait it ended ('sleep' or 'event'); no row
-- when the job is not scheduled in a wait.
WITH waiting AS (
    SELECT s.job_id, s.position, s.kind
    FROM hopper_job_steps AS s
    JOIN hopper_jobs AS j ON j.id = s.job_id
    WHERE s.job_id = @job_id::bigint AND s.state = 'waiting' AND s.until > now()
      AND j.state = 'scheduled'
    ORDER BY s.position DESC
    LIMIT 1
    FOR UPDATE OF s, j
), ended AS (
    UPDATE hopper_job_steps AS s
    SET until = now()
    FROM waiting
    WHERE s.job_id = waiting.job_id AND s.position = waiting.position
), woken AS (
    UPDATE hopper_jobs AS j
    SET state = 'pending', run_at = now()
    FROM waiting
    WHERE j.id = waiting.job_id
    RETURNING j.id, j.queue, j.priority, j.run_at
)
SELECT woken.queue, woken.priority, woken.run_at, waiting.kind
FROM woken CROSS JOIN waiting;

-- name: MarkJobAwaited :one
-- Marks a live job as awaited (hopper.Client.WaitJob), so that its end is
-- announced on hopper_job_ended. Returns whether the job is live, and
-- whether it carries the mark. The table keeps 512 bytes of metadata for
-- Hopper's own keys (migration 28), so a job enqueued within
-- jobs.MaxMetaBytes is always marked; one whose metadata was written past
-- that by SQL of its own may not be, and WaitJob then reads it often.
WITH live AS (
    SELECT j.id, coalesce(j.meta ? 'hopper.awaited', false) AS marked
    FROM hopper_jobs AS j WHERE j.id = @id::bigint
), marked AS (
    UPDATE hopper_jobs AS j
    SET meta = coalesce(j.meta, '{}'::jsonb) || '{"hopper.awaited": true}'::jsonb
    FROM live
    WHERE j.id = live.id AND NOT live.marked
      AND octet_length(coalesce(j.meta, '{}'::jsonb)::text) <= 8678
    RETURNING j.id
)
SELECT EXISTS (SELECT FROM live) AS live,
       (EXISTS (SELECT FROM live WHERE live.marked) OR EXISTS (SELECT FROM marked))::boolean AS marked;

-- name: MarkWorkflowAwaited :one
-- MarkJobAwaited for every live step of a workflow; returns how many are
-- live, and how many of those carry no mark.
WITH live AS (
    SELECT j.id, coalesce(j.meta ? 'hopper.awaited', false) AS marked
    FROM hopper_jobs AS j
    WHERE j.meta ? 'hopper.workflow' AND j.meta ->> 'hopper.workflow' = @workflow::text
), marked AS (
    UPDATE hopper_jobs AS j
    SET meta = coalesce(j.meta, '{}'::jsonb) || '{"hopper.awaited": true}'::jsonb
    FROM live
    WHERE j.id = live.id AND NOT live.marked
      AND octet_length(coalesce(j.meta, '{}'::jsonb)::text) <= 8678
    RETURNING j.id
)
SELECT count(*)::bigint AS live,
       (count(*) FILTER (WHERE NOT live.marked) - (SELECT count(*) FROM marked))::bigint AS unmarked
FROM live;

-- name: CountSuspended :many
-- Scheduled jobs in a durable wait, by queue and kind of wait ('sleep',
-- 'event'), for the metrics and the CLI.
SELECT j.queue, w.kind, count(*)::bigint AS jobs
FROM hopper_jobs AS j
CROSS JOIN LATERAL (
    SELECT s.kind, s.state, s.until
    FROM hopper_job_steps AS s
    WHERE s.job_id = j.id
    ORDER BY s.position DESC
    LIMIT 1
) AS w
WHERE j.state = 'scheduled' AND j.meta ? 'hopper.durable'
  AND w.state = 'waiting' AND w.until > now()
GROUP BY j.queue, w.kind
ORDER BY j.queue, w.kind;

-- name: PruneEvents :execrows
-- Deletes up to max_events events emitted more than keep_ms ago, and the
-- marks of waiting jobs older than an hour (a mark only orders a
-- suspension against an emit; an hour after, both have long committed).
-- An event that a job still waits for is kept, however old: the emit made
-- the job pending, but the job reads the payload only when it runs (a
-- paused queue, a backlog), and a wake-up must never be lost. The job's
-- wait ends when it runs (SettleEvent), and the event goes at a later
-- prune. SKIP LOCKED lets every worker run it.
DELETE FROM hopper_events AS e
WHERE e.name IN (SELECT o.name
                 FROM hopper_events AS o
                 WHERE coalesce(o.emitted_at, o.created_at) < now() - '1 hour'::interval
                   AND (o.emitted_at IS NULL OR o.emitted_at < now() - '1 millisecond'::interval * @keep_ms::bigint)
                   AND NOT EXISTS (SELECT FROM hopper_job_steps AS s -- hopper_job_steps_waiting_idx
                                   WHERE s.name = o.name AND s.kind = 'event' AND s.state = 'waiting')
                 ORDER BY coalesce(o.emitted_at, o.created_at)
                 LIMIT @max_events::integer
                 FOR UPDATE SKIP LOCKED);

-- name: PatchUse :one
-- How many live jobs of a kind hold the marker of a patch (a step record
-- named 'hopper.patch:' || patch, worker.Patched's), and how many hold
-- durable records but not the marker: the runs that may still take the
-- old path (a run that recorded another call where Patched now stands).
-- Reads the records of the kind's live jobs: an operator's question, not
-- a hot path.
WITH durable AS (
    SELECT DISTINCT s.job_id
    FROM hopper_job_steps AS s
    JOIN hopper_jobs AS j ON j.id = s.job_id
    WHERE j.kind = @kind::text
), marked AS (
    SELECT DISTINCT s.job_id
    FROM hopper_job_steps AS s
    JOIN hopper_jobs AS j ON j.id = s.job_id
    WHERE j.kind = @kind::text AND s.kind = 'step' AND s.name = 'hopper.patch:' || @patch::text
)
SELECT (SELECT count(*) FROM marked)::bigint AS marked,
       ((SELECT count(*) FROM durable) - (SELECT count(*) FROM marked))::bigint AS unmarked;

-- name: ListPatches :many
-- Every patch whose marker live jobs hold, by kind, with PatchUse's
-- counts.
WITH marks AS (
    SELECT j.kind, s.name, count(DISTINCT s.job_id) AS marked
    FROM hopper_job_steps AS s
    JOIN hopper_jobs AS j ON j.id = s.job_id
    WHERE s.kind = 'step' AND s.name LIKE 'hopper.patch:%'
    GROUP BY j.kind, s.name
), durable AS (
    SELECT j.kind, count(DISTINCT s.job_id) AS jobs
    FROM hopper_job_steps AS s
    JOIN hopper_jobs AS j ON j.id = s.job_id
    WHERE j.kind IN (SELECT m.kind FROM marks AS m)
    GROUP BY j.kind
)
SELECT m.kind::text AS kind, substr(m.name, char_length('hopper.patch:') + 1)::text AS patch,
       m.marked::bigint AS marked, (d.jobs - m.marked)::bigint AS unmarked
FROM marks AS m
JOIN durable AS d ON d.kind = m.kind
ORDER BY 1, 2;
