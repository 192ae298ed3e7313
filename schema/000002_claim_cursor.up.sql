-- Wake-ups carry where the new ready jobs sit in claim order.
--
-- Workers claim from a cursor: they seek past the ready-index entries of
-- jobs already claimed instead of walking them. Those entries are dead but
-- cannot be removed while any transaction holds an older snapshot open, and
-- walking them made every claim slower the longer such a snapshot lived. A
-- job that becomes ready behind a worker's cursor (its transaction committed
-- after later jobs were claimed, or it was enqueued with a past run_at) is
-- announced here with the smallest (priority, run_at, id) of its statement,
-- and the worker moves its cursor back to it. Notifications are sent at
-- commit, so a worker never hears of a job it cannot yet see.
CREATE OR REPLACE FUNCTION hopper_notify_enqueued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hopper_jobs', json_build_object(
                'schema', TG_TABLE_SCHEMA,
                'queue', ready.queue,
                'priority', ready.priority,
                'run_at', ready.run_at,
                'id', ready.id)::text)
    FROM (SELECT n.queue, min(n.priority) AS priority, min(n.run_at) AS run_at, min(n.id) AS id
          FROM hopper_new_jobs AS n
          WHERE n.state = 'pending'
          GROUP BY n.queue) AS ready;
    RETURN NULL;
END;
$$;
