-- name: Listen :exec
-- Subscribes this session to wake-ups. Payloads are JSON objects
-- {"schema", "queue", "priority", "run_at", "id"}: the schema names which deployment the jobs
-- belong to, so several deployments can share one database. Needs a session
-- of its own (not through PgBouncer in transaction mode; poll there).
LISTEN hopper_jobs;

-- name: Notify :exec
-- Wakes workers on the queues of jobs that became pending without an insert
-- (a release, a sweep, a promotion; inserts need no call, the trigger on
-- hopper_jobs notifies). The i-th job is in queues[i] at (priorities[i],
-- run_ats[i], ids[i]) in claim order; each queue's wake-up carries the
-- smallest of each, a place at or before all of its jobs, so workers whose
-- cursor has moved past them move it back. The schema named is the one
-- holding hopper_jobs, as in the trigger.
SELECT pg_notify('hopper_jobs', json_build_object(
           'schema', home.nspname,
           'queue', k.queue,
           'priority', k.priority,
           'run_at', k.run_at,
           'id', k.id)::text)
FROM (SELECT u.queue, min(u.priority) AS priority, min(u.run_at) AS run_at, min(u.id) AS id
      FROM (SELECT unnest(@queues::text[]) AS queue,
                   unnest(@priorities::smallint[]) AS priority,
                   unnest(@run_ats::timestamptz[]) AS run_at,
                   unnest(@ids::bigint[]) AS id) AS u
      GROUP BY u.queue) AS k,
     (SELECT n.nspname
      FROM pg_catalog.pg_class AS c
      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
      WHERE c.oid = to_regclass('hopper_jobs')) AS home;

-- name: ListenJobEnded :exec
-- Subscribes this session to the ends of awaited jobs (hopper.Client's
-- WaitJob and WaitWorkflow). Payloads are JSON objects {"schema", "ids",
-- "more"}: the ids of awaited jobs that left hopper_jobs in one
-- statement (at most 500; more says some were left out), sent by
-- hopper_durable_ended.
LISTEN hopper_job_ended;

-- name: UnlistenJobEnded :exec
-- Ends ListenJobEnded's subscription before the session goes back to its
-- pool.
UNLISTEN hopper_job_ended;
