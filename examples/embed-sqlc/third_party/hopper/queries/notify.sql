-- name: Listen :exec
-- Subscribes this session to wake-ups. Payloads are JSON objects
-- {"schema": ..., "queue": ...}: the schema names which deployment the jobs
-- belong to, so several deployments can share one database. Needs a session
-- of its own (not through PgBouncer in transaction mode; poll there).
LISTEN hopper_jobs;

-- name: Notify :exec
-- Wakes workers idling on the given queues (after a release or a sweep put
-- jobs back). Inserts need no call: the trigger on hopper_jobs notifies.
-- The schema named is the one holding hopper_jobs, as in the trigger.
SELECT pg_notify('hopper_jobs', json_build_object('schema', home.nspname, 'queue', q.queue)::text)
FROM (SELECT DISTINCT unnest(@queues::text[]) AS queue) AS q,
     (SELECT n.nspname
      FROM pg_catalog.pg_class AS c
      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
      WHERE c.oid = to_regclass('hopper_jobs')) AS home;
