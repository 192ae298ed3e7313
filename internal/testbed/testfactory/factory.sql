-- Test-only statements: package testfactory writes jobs straight into
-- the tables in any state. They are not in queries/ on purpose: that
-- folder is embedded for `hopper sql export` and compiled into package
-- db, both of which users get, and no user should insert a running job
-- with a lease nobody holds.

-- name: FactoryInsertLive :one
-- A job in hopper_jobs: pending, scheduled or running (a running job has
-- a lease owner and lease_until, 'testfactory' and 30 seconds from now
-- unless given; other states have none). Every other timestamp left NULL
-- is now().
INSERT INTO hopper_jobs (
    queue, kind, version, payload, state, priority, run_at, attempt, max_attempts,
    lease_owner, lease_until, unique_key, errors, created_at, meta, concurrency_key
) VALUES (
    @queue::text, @kind::text, @version::integer, @payload::jsonb, @state::text,
    @priority::smallint, coalesce(sqlc.narg(run_at)::timestamptz, now()),
    @attempt::integer, @max_attempts::integer,
    CASE WHEN @state::text = 'running' THEN coalesce(sqlc.narg(lease_owner)::text, 'testfactory') END,
    CASE WHEN @state::text = 'running'
         THEN coalesce(sqlc.narg(lease_until)::timestamptz, now() + interval '30 seconds') END,
    sqlc.narg(unique_key)::text, @errors::jsonb,
    coalesce(sqlc.narg(created_at)::timestamptz, now()), sqlc.narg(meta)::jsonb,
    sqlc.narg(concurrency_key)::text
)
RETURNING id;

-- name: FactoryInsertDead :one
-- A job in hopper_dead_jobs, dead or cancelled, with an id from the live
-- table's own sequence as the worker's move would keep it. It goes to the
-- dead jobs' time partition that covers its died_at, if one does, as a
-- job that died then would have.
INSERT INTO hopper_dead_jobs (
    id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key,
    errors, reason, created_at, died_at, state, run_at, meta, concurrency_key, partition_at
) VALUES (
    nextval(pg_get_serial_sequence('hopper_jobs', 'id')::regclass),
    @queue::text, @kind::text, @version::integer, @payload::jsonb, @priority::smallint,
    @attempt::integer, @max_attempts::integer, sqlc.narg(unique_key)::text,
    @errors::jsonb, @reason::text, coalesce(sqlc.narg(created_at)::timestamptz, now()),
    coalesce(sqlc.narg(finished_at)::timestamptz, now()), @state::text,
    coalesce(sqlc.narg(run_at)::timestamptz, now()), sqlc.narg(meta)::jsonb,
    sqlc.narg(concurrency_key)::text,
    hopper_dead_partition_at(coalesce(sqlc.narg(finished_at)::timestamptz, now()))
)
RETURNING id;

-- name: FactoryInsertCompleted :one
-- A completed job in hopper_job_history, kept until keep_until.
INSERT INTO hopper_job_history (
    id, queue, kind, version, payload, priority, attempt, max_attempts, unique_key,
    errors, run_at, result, created_at, finished_at, keep_until, meta, concurrency_key
) VALUES (
    nextval(pg_get_serial_sequence('hopper_jobs', 'id')::regclass),
    @queue::text, @kind::text, @version::integer, @payload::jsonb, @priority::smallint,
    @attempt::integer, @max_attempts::integer, sqlc.narg(unique_key)::text,
    @errors::jsonb, coalesce(sqlc.narg(run_at)::timestamptz, now()), sqlc.narg(result)::jsonb,
    coalesce(sqlc.narg(created_at)::timestamptz, now()),
    coalesce(sqlc.narg(finished_at)::timestamptz, now()),
    coalesce(sqlc.narg(keep_until)::timestamptz, now() + interval '1 day'),
    sqlc.narg(meta)::jsonb, sqlc.narg(concurrency_key)::text
)
RETURNING id;

-- name: FactoryInsertWorker :exec
-- A worker in the registry whose last beat was last_seen_ago_ms ago: live
-- or gone, as its stale_after_ms says.
INSERT INTO hopper_workers (id, host, pid, hopper_version, queues, stale_after_ms, started_at, last_seen_at)
VALUES (@id::text, @host::text, @pid::integer, @hopper_version::text, @queues::text[], @stale_after_ms::bigint,
        now() - '1 millisecond'::interval * @last_seen_ago_ms::bigint,
        now() - '1 millisecond'::interval * @last_seen_ago_ms::bigint);

-- name: FactoryInsertStep :exec
-- One durable record of a job at position (a step, a sleep or an event
-- wait, in any state), and the job marked durable as worker.RecordStep
-- marks it, so that its end removes the record.
WITH marked AS (
    UPDATE hopper_jobs SET meta = coalesce(meta, '{}'::jsonb) || '{"hopper.durable": true}'::jsonb
    WHERE id = @job_id::bigint
)
INSERT INTO hopper_job_steps (job_id, position, name, kind, state, result, until)
VALUES (@job_id::bigint, @position::integer, @name::text, @kind::text, @state::text,
        sqlc.narg(result)::jsonb, sqlc.narg(until)::timestamptz);

-- name: FactorySetProgress :exec
-- A job's progress, and the job marked durable, as worker.SetProgress
-- records it.
WITH marked AS (
    UPDATE hopper_jobs SET meta = coalesce(meta, '{}'::jsonb) || '{"hopper.durable": true}'::jsonb
    WHERE id = @job_id::bigint
)
INSERT INTO hopper_job_progress (job_id, progress) VALUES (@job_id::bigint, @progress::jsonb)
ON CONFLICT (job_id) DO UPDATE SET progress = excluded.progress, updated_at = now();
