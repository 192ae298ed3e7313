-- name: SeeScheduleVersions :exec
-- Reports the definitions (names[i], hashes[i]) this worker holds: first
-- seen now if new, last seen now in any case. Workers run it at start and
-- then regularly; a definition not reported for stale_after_ms is stale.
-- The update reads the statement's now() as excluded.last_seen_at (the
-- column's default): Citus refuses a function in DO UPDATE SET on a
-- distributed table (docs/scaling-out.md).
INSERT INTO hopper_schedule_versions (name, hash, stale_after_ms)
SELECT unnest(@names::text[]), unnest(@hashes::text[]), @stale_after_ms::bigint
ON CONFLICT (name, hash) DO UPDATE
SET last_seen_at = excluded.last_seen_at, stale_after_ms = excluded.stale_after_ms;

-- name: DefineSchedule :one
-- Puts a worker's definition of a schedule in force, or leaves the one in
-- force: a new schedule is created; an existing one takes this definition
-- when it differs and was first seen after the one in force (a newer
-- deploy), or when the one in force is stale (no running worker reports
-- it: a removed deploy, a rollback). next_fire_at is kept while the
-- expression and zone are the same, else it becomes next_fire_at given
-- (the new expression's first slot after now), so the slot just fired is
-- never fired again. Report the definition first (SeeScheduleVersions).
-- The row that comes back is the schedule as it now is; in_force says
-- whether this definition is the one in force, and replaced_live_kind,
-- when it has just replaced a definition a running worker still reports,
-- that one's kind ('' otherwise): a definition of another kind is a
-- renamed kind, or another application's schedule of the same name (the
-- names are the schema's), which the caller warns of.
--
-- Whether this definition may replace the one in force is decided before
-- the insert, which gives no row when it may not: Citus refuses functions
-- and subqueries in ON CONFLICT DO UPDATE on a distributed table
-- (docs/scaling-out.md), so updated_at is excluded's (its default, the
-- statement's now()), and the update's own condition is only that the
-- definition differs. mine and current are materialized, so that the
-- insert's SELECT reads no table (Citus deparses an INSERT ... SELECT
-- that reads a table of the shard wrongly). The answer is the upsert's row when it wrote one,
-- else the schedule as the statement found it: on Citus, where each part
-- of the statement runs as a statement of its own, the same.
WITH mine AS MATERIALIZED (
    SELECT v.first_seen_at FROM hopper_schedule_versions AS v
    WHERE v.name = @name::text AND v.hash = @definition_hash::text
), current AS MATERIALIZED (
    SELECT v.first_seen_at, s.kind,
           v.last_seen_at + '1 millisecond'::interval * v.stale_after_ms AS stale_at
    FROM hopper_schedules AS s
    JOIN hopper_schedule_versions AS v ON v.name = s.name AND v.hash = s.definition_hash
    WHERE s.name = @name::text
), upserted AS (
    INSERT INTO hopper_schedules (name, kind, expression, time_zone, policy, catch_up, queue, definition_hash, next_fire_at)
    SELECT @name::text, @kind::text, @expression::text, @time_zone::text, @policy::text, @catch_up::integer,
           @queue::text, @definition_hash::text, @next_fire_at::timestamptz
    WHERE NOT EXISTS (SELECT FROM current)
       OR (SELECT current.stale_at FROM current) < now()
       OR (SELECT mine.first_seen_at FROM mine) > (SELECT current.first_seen_at FROM current)
    ON CONFLICT (name) DO UPDATE
    SET kind            = excluded.kind,
        expression      = excluded.expression,
        time_zone       = excluded.time_zone,
        policy          = excluded.policy,
        catch_up        = excluded.catch_up,
        queue           = excluded.queue,
        definition_hash = excluded.definition_hash,
        next_fire_at    = CASE WHEN hopper_schedules.expression = excluded.expression
                                AND hopper_schedules.time_zone = excluded.time_zone
                               THEN hopper_schedules.next_fire_at
                               ELSE excluded.next_fire_at END,
        updated_at      = excluded.updated_at
    WHERE hopper_schedules.definition_hash <> excluded.definition_hash
    RETURNING name, definition_hash, expression, time_zone, next_fire_at
)
SELECT upserted.name, upserted.definition_hash, upserted.expression, upserted.time_zone, upserted.next_fire_at,
       true AS in_force,
       coalesce((SELECT current.kind FROM current WHERE current.stale_at >= now()), '')::text AS replaced_live_kind
FROM upserted
UNION ALL
SELECT s.name, s.definition_hash, s.expression, s.time_zone, s.next_fire_at,
       (s.definition_hash = @definition_hash::text)::boolean, ''
FROM hopper_schedules AS s
WHERE s.name = @name::text
  AND NOT EXISTS (SELECT FROM upserted);

-- name: DueSchedule :one
-- Takes one schedule of the given names that is due (not paused, its
-- next_fire_at come) or triggered, locked for the caller's transaction;
-- SKIP LOCKED lets every worker look at once without waiting, and a
-- schedule is fired by one of them. now is the database's clock, which
-- decides what is due. No row: nothing is due.
SELECT s.name, s.expression, s.time_zone, s.policy, s.catch_up, s.next_fire_at,
       s.triggered_at, (s.paused_at IS NOT NULL)::boolean AS paused, now()::timestamptz AS now
FROM hopper_schedules AS s
WHERE s.name = ANY(@names::text[])
  AND ((s.paused_at IS NULL AND s.next_fire_at <= now()) OR s.triggered_at IS NOT NULL)
ORDER BY s.next_fire_at
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: AdvanceSchedule :execrows
-- Moves a fired schedule on, by compare-and-set: only if next_fire_at is
-- still expected_next (and, for a trigger, triggered_at still
-- expected_trigger). Run it in the transaction that took the schedule
-- (DueSchedule) and enqueued its jobs: 0 rows means something moved it
-- meanwhile, and the transaction must roll back, jobs and all. The clock
-- is read in a subquery and only chosen by the CASE: Citus refuses now()
-- in a CASE of a write (docs/scaling-out.md).
UPDATE hopper_schedules AS s
SET next_fire_at = @following::timestamptz,
    last_fire_at = CASE WHEN @fired::boolean THEN clock.now ELSE s.last_fire_at END,
    last_slot    = coalesce(sqlc.narg(last_slot)::timestamptz, s.last_slot),
    triggered_at = NULL,
    updated_at   = clock.now
FROM (SELECT now() AS now) AS clock
WHERE s.name = @name::text
  AND s.next_fire_at = @expected_next::timestamptz
  AND s.triggered_at IS NOT DISTINCT FROM sqlc.narg(expected_trigger)::timestamptz;

-- name: NextScheduleFire :one
-- When the first of the given schedules is due next (a triggered one now);
-- a day from now when none of them can fire (all paused, or none defined).
SELECT coalesce(min(CASE WHEN s.triggered_at IS NOT NULL THEN now()
                         WHEN s.paused_at IS NULL THEN s.next_fire_at END),
                now() + interval '1 day')::timestamptz AS next_fire_at
FROM hopper_schedules AS s
WHERE s.name = ANY(@names::text[]);

-- name: ListSchedules :many
-- Every schedule, with its definition in force and whether that definition
-- is stale: no running worker has reported it for its stale_after.
SELECT s.name, s.kind, s.expression, s.time_zone, s.policy, s.catch_up, s.queue,
       s.next_fire_at, s.last_fire_at, s.last_slot, s.paused_at, s.triggered_at,
       s.created_at, s.updated_at,
       v.last_seen_at AS last_seen_at,
       (v.last_seen_at IS NULL
        OR v.last_seen_at + '1 millisecond'::interval * v.stale_after_ms < now())::boolean AS stale
FROM hopper_schedules AS s
LEFT JOIN hopper_schedule_versions AS v ON v.name = s.name AND v.hash = s.definition_hash
ORDER BY s.name;

-- name: PauseSchedule :one
-- Pauses a schedule: no worker fires it until it is resumed. Pausing a
-- paused schedule changes nothing; was_paused says so, and paused_at stays
-- the time of the first pause. No row: no such schedule.
-- The clock is read once, in before, for the row and the answer: on Citus
-- each part of the statement runs as a statement of its own, and a now()
-- in each could be read apart.
WITH before AS (
    SELECT s.name, s.paused_at, now() AS now FROM hopper_schedules AS s WHERE s.name = @name::text FOR UPDATE
), paused AS (
    UPDATE hopper_schedules AS s
    SET paused_at = before.now, updated_at = before.now
    FROM before
    WHERE s.name = before.name AND before.paused_at IS NULL
    RETURNING s.name
)
SELECT (before.paused_at IS NOT NULL)::boolean AS was_paused,
       coalesce(before.paused_at, before.now)::timestamptz AS paused_at
FROM before;

-- name: ResumeSchedule :one
-- Resumes a paused schedule at next_fire_at (its first slot after now: the
-- slots that fell due while it was paused do not fire) and wakes the
-- workers. paused_at is when it had been paused (NULL if it was not). No
-- row: no such schedule.
WITH before AS (
    SELECT s.name, s.paused_at FROM hopper_schedules AS s WHERE s.name = @name::text FOR UPDATE
), resumed AS (
    UPDATE hopper_schedules AS s
    SET paused_at = NULL, next_fire_at = @next_fire_at::timestamptz, updated_at = now()
    FROM before
    WHERE s.name = before.name AND before.paused_at IS NOT NULL
    RETURNING s.name
), woken AS (
    SELECT count(hopper_wake('hopper_jobs', json_build_object('schema', n.nspname, 'schedule', resumed.name)::text)) AS sent
    FROM resumed,
         pg_catalog.pg_class AS c
         JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
    WHERE c.oid = to_regclass('hopper_jobs')
)
SELECT (before.paused_at IS NOT NULL)::boolean AS was_paused,
       before.paused_at AS paused_at
FROM before
CROSS JOIN woken;

-- name: TriggerSchedule :one
-- Asks for one fire now, paused or not (a worker defining the schedule
-- enqueues it at once, with now as its slot), without moving the schedule
-- on. A trigger already waiting is kept. No row: no such schedule.
-- The clock is read in a subquery: Citus refuses now() in a COALESCE of a
-- write (docs/scaling-out.md).
WITH triggered AS (
    UPDATE hopper_schedules AS s
    SET triggered_at = coalesce(s.triggered_at, clock.now), updated_at = clock.now
    FROM (SELECT now() AS now) AS clock
    WHERE s.name = @name::text
    RETURNING s.name, s.triggered_at
), woken AS (
    SELECT count(hopper_wake('hopper_jobs', json_build_object('schema', n.nspname, 'schedule', triggered.name)::text)) AS sent
    FROM triggered,
         pg_catalog.pg_class AS c
         JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
    WHERE c.oid = to_regclass('hopper_jobs')
)
SELECT triggered.triggered_at::timestamptz AS triggered_at
FROM triggered
CROSS JOIN woken;

-- name: GetSchedule :one
-- One schedule's expression and zone (to compute its next slot).
SELECT s.name, s.expression, s.time_zone, s.paused_at FROM hopper_schedules AS s WHERE s.name = @name::text;
