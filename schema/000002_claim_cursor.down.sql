CREATE OR REPLACE FUNCTION hopper_notify_enqueued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hopper_jobs', json_build_object('schema', TG_TABLE_SCHEMA, 'queue', ready.queue)::text)
    FROM (SELECT DISTINCT queue FROM hopper_new_jobs WHERE run_at <= now()) AS ready;
    RETURN NULL;
END;
$$;
