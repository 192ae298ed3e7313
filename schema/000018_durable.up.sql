-- Durable handlers: jobs that remember what they did.
--
-- 1. hopper_job_steps records, per job and in call order, what a durable
--    handler did: a step's result (worker.Step, worker.StepTx), a sleep's
--    wake time (worker.Sleep), an awaited event's deadline and, once it
--    came, its payload (worker.AwaitEvent). A later run of the job replays
--    the records instead of doing the work again. position is the call's
--    place in the run, so a handler whose calls changed order or name is
--    caught. The primary key is what makes a transactional step exact: two
--    runs that both did a step's work in their own transaction cannot both
--    record it, and the loser's transaction rolls back with its effects.
-- 2. hopper_events holds named events (hopper_emit_event). A row whose
--    emitted_at is NULL is a mark a job left as it went to wait for the
--    event: the job's suspension and an emit of the same name both write
--    the row, so one of them waits for the other's commit and no wake-up
--    falls between them (see SuspendForEvents in queries/durable.sql).
-- 3. hopper_job_progress holds a running job's last progress value.
-- 4. A job that recorded anything carries meta 'hopper.durable'; one a
--    caller waits for (Client.WaitJob) carries 'hopper.awaited'. When such
--    a job leaves hopper_jobs for good (completed, deleted) or is purged
--    from hopper_dead_jobs, its records go with it, and awaited ones are
--    announced on the channel hopper_job_ended. A job that dies keeps its
--    records, so that a retry replays them. Plain jobs carry neither mark:
--    the triggers read their rows and do nothing else.
--
-- Guarded by: worker/TestDurable*, hopper TestWaitJob*, TestEmitEvent*,
-- schema/TestTriggerRules, schema/TestPLpgSQLCheck, tests/chaos
-- TestChaosDurable.

CREATE TABLE hopper_job_steps (
    job_id     bigint      NOT NULL,
    position   integer     NOT NULL CHECK (position >= 0 AND position < 10000),
    name       text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 255),
    kind       text        NOT NULL CHECK (kind IN ('step', 'sleep', 'event')),
    -- done: the step ran, or the event came; waiting: a sleep (until its
    -- wake time) or an event not yet come (until its deadline); timed_out:
    -- an event that did not come in time.
    state      text        NOT NULL CHECK (state IN ('done', 'waiting', 'timed_out')),
    result     jsonb       CHECK (result IS NULL OR octet_length(result::text) <= 65536),
    until      timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, position),
    CHECK ((kind = 'step') = (until IS NULL))
);

-- An emit finds the jobs waiting for its event here.
CREATE INDEX hopper_job_steps_waiting_idx ON hopper_job_steps (name) WHERE kind = 'event' AND state = 'waiting';

CREATE TABLE hopper_events (
    name       text        PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 255),
    payload    jsonb       CHECK (payload IS NULL OR octet_length(payload::text) <= 65536),
    emitted_at timestamptz, -- NULL: only a waiting job's mark
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (emitted_at IS NULL OR payload IS NOT NULL)
);
CREATE INDEX hopper_events_age_idx ON hopper_events ((coalesce(emitted_at, created_at)));

CREATE TABLE hopper_job_progress (
    job_id     bigint      PRIMARY KEY,
    progress   jsonb       NOT NULL CHECK (octet_length(progress::text) <= 4096),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Emits the event name with payload: records it (replacing the payload of
-- an earlier emit of the name) and makes every job waiting for it pending
-- at once. A job that waits for the name later receives it too, until the
-- workers prune the event (worker.Config.EventRetention). Returns how
-- many waiting jobs it woke. Call it in the transaction that makes the
-- event true: it is seen only once that commits.
CREATE FUNCTION hopper_emit_event(name text, payload jsonb DEFAULT 'null'::jsonb) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    woken integer;
    ready record;
BEGIN
    IF name IS NULL OR char_length(name) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'hopper: invalid event name: want 1 to 255 characters';
    END IF;
    payload := coalesce(payload, 'null'::jsonb);
    IF octet_length(payload::text) > 65536 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'hopper: event payload too large: ' || octet_length(payload::text) || ' bytes, at most 65536';
    END IF;
    -- Writing the row waits for a job suspending itself on this event (it
    -- holds the row), so the statement below sees that job scheduled.
    INSERT INTO hopper_events AS e (name, payload, emitted_at)
    VALUES (name, payload, now())
    ON CONFLICT ON CONSTRAINT hopper_events_pkey
    DO UPDATE SET payload = EXCLUDED.payload, emitted_at = EXCLUDED.emitted_at;

    woken := 0;
    FOR ready IN
        WITH woke AS (
            UPDATE hopper_jobs AS j
            SET state = 'pending', run_at = now()
            WHERE j.id IN (SELECT s.job_id FROM hopper_job_steps AS s
                           WHERE s.name = name AND s.kind = 'event' AND s.state = 'waiting')
              AND j.state = 'scheduled'
            RETURNING j.id, j.queue, j.priority, j.run_at
        )
        SELECT w.queue, min(w.priority) AS priority, min(w.run_at) AS run_at, min(w.id) AS id, count(*) AS jobs
        FROM woke AS w
        GROUP BY w.queue
    LOOP
        -- as hopper_notify_enqueued announces an insert: the workers of the
        -- queue claim at once
        PERFORM pg_notify('hopper_jobs', json_build_object(
                    'schema', (SELECT n.nspname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
                               WHERE c.oid = 'hopper_jobs'::regclass),
                    'queue', ready.queue,
                    'priority', ready.priority,
                    'run_at', ready.run_at,
                    'id', ready.id)::text);
        woken := woken + ready.jobs;
    END LOOP;
    RETURN woken;
END;
$$;

-- Deletes the records of durable jobs that left for good, and announces
-- the awaited ones. TG_ARGV[0] names the table a job may have moved to
-- in the same statement, whose jobs keep their records: a job that died
-- (hopper_jobs → hopper_dead_jobs) keeps them for a retry, a retried
-- dead job (hopper_dead_jobs → hopper_jobs) still needs them.
CREATE FUNCTION hopper_durable_ended() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    marked bigint[];
    gone bigint[];
    awaited bigint[];
BEGIN
    SELECT array_agg(o.id) FILTER (WHERE o.meta ? 'hopper.durable'),
           array_agg(o.id) FILTER (WHERE o.meta ? 'hopper.awaited')
    INTO marked, awaited
    FROM hopper_ended_jobs AS o
    WHERE o.meta ?| ARRAY['hopper.durable', 'hopper.awaited'];
    IF marked IS NULL AND awaited IS NULL THEN
        RETURN NULL;
    END IF;
    IF marked IS NOT NULL THEN
        IF TG_ARGV[0] = 'hopper_dead_jobs' THEN
            SELECT array_agg(m) INTO gone FROM unnest(marked) AS m
            WHERE NOT EXISTS (SELECT FROM hopper_dead_jobs AS d WHERE d.id = m);
        ELSE
            SELECT array_agg(m) INTO gone FROM unnest(marked) AS m
            WHERE NOT EXISTS (SELECT FROM hopper_jobs AS j WHERE j.id = m);
        END IF;
        IF gone IS NOT NULL THEN
            DELETE FROM hopper_job_steps WHERE job_id = ANY (gone);
            DELETE FROM hopper_job_progress WHERE job_id = ANY (gone);
        END IF;
    END IF;
    IF awaited IS NOT NULL THEN
        -- At most 500 ids (a notification holds 8000 bytes): a waiter that
        -- finds its job missing from a full list reads the job anyway.
        PERFORM pg_notify('hopper_job_ended', json_build_object(
                    'schema', TG_TABLE_SCHEMA,
                    'ids', awaited[1:500],
                    'more', cardinality(awaited) > 500)::text);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER hopper_jobs_durable_ended
    AFTER DELETE ON hopper_jobs
    REFERENCING OLD TABLE AS hopper_ended_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_durable_ended('hopper_dead_jobs');

CREATE TRIGGER hopper_dead_jobs_durable_ended
    AFTER DELETE ON hopper_dead_jobs
    REFERENCING OLD TABLE AS hopper_ended_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION hopper_durable_ended('hopper_jobs');
