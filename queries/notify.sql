-- name: Listen :exec
-- Subscribes this session to wake-ups. Payloads are JSON objects
-- {"schema": ..., "queue": ...}: the schema names which deployment the jobs
-- belong to, so several deployments can share one database. Needs a session
-- of its own (not through PgBouncer in transaction mode; poll there).
LISTEN hopper_jobs;

-- name: Notify :exec
-- Wakes workers idling on the given queues (after a release or a sweep put
-- jobs back). Inserts need no call: the trigger on hopper_jobs notifies.
SELECT pg_notify('hopper_jobs', json_build_object('schema', current_schema(), 'queue', q.queue)::text)
FROM (SELECT DISTINCT unnest(@queues::text[]) AS queue) AS q;
