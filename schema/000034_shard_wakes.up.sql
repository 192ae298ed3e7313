-- Wake-ups a shard can keep silent (issue 64): every NOTIFY of the
-- schema's functions now goes through hopper_wake, which sends it unless
-- the schema is a silent one.
--
-- A sharded Hopper (package shard, docs/scaling-out.md) is many Hopper
-- schemas, each a distributed schema of Citus, used through the
-- coordinator. A statement there with CTEs, or an INSERT … SELECT, makes
-- Citus send intermediate results to every node, and a transaction that
-- writes to two nodes: Citus commits both in two phases, and PostgreSQL
-- refuses to PREPARE a transaction that ran NOTIFY ("cannot PREPARE a
-- transaction that has executed LISTEN, UNLISTEN, or NOTIFY"). The
-- functions below run on the shard's node (triggers, or called by them)
-- and notified there, where no worker listens anyway (the sharded
-- workers listen on the coordinator): so every sequence enqueue, unique
-- enqueue or workflow written through the coordinator failed.
--
-- hopper_silent() is the switch: false here, so on plain PostgreSQL every
-- wake-up is sent as before, on the same channel with the same payload.
-- shard.Create's hopper_prepare_shard replaces it in each shard by one
-- that returns true; Citus propagates that to the shard's node. It is a
-- SQL function whose body is a constant, inlined into hopper_wake's test:
-- it costs no table read per trigger call, and no migration's data. A
-- later migration that redefines hopper_wake keeps the switch, since the
-- switch is a function of its own.
--
-- The six functions that called pg_notify are restated from their latest
-- definitions (migrations 2, 18 and 33), pg_notify( replaced by
-- hopper_wake( and nothing else; CREATE OR REPLACE drops a function's
-- settings, so they are restated at the end. hopper_notify_enqueued now
-- pins its search_path too, to find hopper_wake in its schema.

CREATE OR REPLACE FUNCTION hopper_silent() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT false $$;

-- hopper_wake sends payload on channel (as pg_notify does, at commit)
-- unless the schema is silent (hopper_silent).
CREATE OR REPLACE FUNCTION hopper_wake(channel text, payload text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT hopper_silent() THEN
        PERFORM pg_notify(channel, payload);
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_notify_enqueued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM hopper_wake('hopper_jobs', json_build_object(
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

CREATE OR REPLACE FUNCTION hopper_emit_event(name text, payload jsonb DEFAULT 'null'::jsonb) RETURNS integer
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
        PERFORM hopper_wake('hopper_jobs', json_build_object(
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

CREATE OR REPLACE FUNCTION hopper_durable_ended() RETURNS trigger
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
        PERFORM hopper_wake('hopper_job_ended', json_build_object(
                    'schema', TG_TABLE_SCHEMA,
                    'ids', awaited[1:500],
                    'more', cardinality(awaited) > 500)::text);
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_sequence_promote(sequence_key text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    -- now(), read once: see the migration's note (1)
    clock timestamptz := now();
    next record;
BEGIN
    FOR round IN 1..100 LOOP
        UPDATE hopper_jobs AS j
        SET state = CASE WHEN j.run_at > clock THEN 'scheduled' ELSE 'pending' END,
            run_at = greatest(j.run_at, clock)
        WHERE j.id = (SELECT w.id FROM hopper_jobs AS w
                      WHERE (w.meta ->> 'hopper.sequence') = sequence_key AND w.state = 'waiting'
                      ORDER BY w.id
                      LIMIT 1)
          AND j.state = 'waiting'
        RETURNING j.id, j.queue, j.state, j.priority, j.run_at INTO next;
        IF FOUND THEN
            -- The wake-up names the job's place in claim order, as Notify
            -- does.
            IF next.state = 'pending' THEN
                PERFORM hopper_wake('hopper_jobs', json_build_object(
                    'schema', current_schema(), 'queue', next.queue,
                    'priority', next.priority, 'run_at', next.run_at, 'id', next.id)::text);
            END IF;
            RETURN next.id;
        END IF;
        IF NOT EXISTS (SELECT FROM hopper_jobs AS w
                       WHERE (w.meta ->> 'hopper.sequence') = sequence_key AND w.state = 'waiting') THEN
            RETURN NULL;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'hopper: sequence %: could not promote its next job in 100 rounds', sequence_key;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_sequence_promote_keys(keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- now(), read once: see the migration's note (1)
    clock timestamptz := now();
    done text[];
    missed text;
BEGIN
    WITH promoted AS (
        UPDATE hopper_jobs AS j
        SET state = CASE WHEN j.run_at > clock THEN 'scheduled' ELSE 'pending' END,
            run_at = greatest(j.run_at, clock)
        FROM (SELECT f.id
              FROM unnest(keys) AS k(key)
              CROSS JOIN LATERAL (SELECT w.id FROM hopper_jobs AS w
                                  WHERE (w.meta ->> 'hopper.sequence') = k.key AND w.state = 'waiting'
                                  ORDER BY w.id
                                  LIMIT 1) AS f
              ORDER BY f.id) AS next
        WHERE j.id = next.id AND j.state = 'waiting'
        RETURNING j.id, j.queue, j.state, j.priority, j.run_at, j.meta ->> 'hopper.sequence' AS key
    ), woken AS (
        SELECT count(hopper_wake('hopper_jobs', json_build_object(
                   'schema', current_schema(), 'queue', q.queue,
                   'priority', q.priority, 'run_at', q.run_at, 'id', q.id)::text)) AS sent
        FROM (SELECT p.queue, min(p.priority) AS priority, min(p.run_at) AS run_at, min(p.id) AS id
              FROM promoted AS p
              WHERE p.state = 'pending'
              GROUP BY p.queue) AS q
    )
    SELECT coalesce(array_agg(p.key), '{}') INTO done
    FROM promoted AS p
    CROSS JOIN woken
    WHERE woken.sent >= 0;
    FOR missed IN
        SELECT k.key FROM (SELECT unnest(keys) EXCEPT SELECT unnest(done)) AS k(key)
        WHERE EXISTS (SELECT FROM hopper_jobs AS w WHERE (w.meta ->> 'hopper.sequence') = k.key AND w.state = 'waiting')
          AND NOT EXISTS (SELECT FROM hopper_jobs AS h
                          WHERE (h.meta ->> 'hopper.sequence') = k.key AND h.state <> 'waiting' AND h.meta ? 'hopper.sequence')
    LOOP
        PERFORM hopper_sequence_promote(missed);
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_workflow_decide(ready bigint[]) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- now(), read once: see the migration's note (1)
    clock timestamptz := now();
    go bigint[];
    doomed bigint[];
    held bigint[];
    cancelled bigint[];
    woken bigint;
BEGIN
    IF ready IS NULL OR cardinality(ready) = 0 THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(v.id) FILTER (WHERE v.failed IS NULL OR v.policy = 'run'),
           array_agg(v.id) FILTER (WHERE v.failed IS NOT NULL AND v.policy <> 'run'
                                     AND (v.policy = 'cancel' OR v.failed = 'purged')),
           array_agg(v.id) FILTER (WHERE v.failed = 'kept' AND v.policy = 'wait')
    INTO go, doomed, held
    FROM (SELECT j.id, coalesce(j.meta ->> 'hopper.workflow_policy', 'cancel') AS policy,
                 (SELECT CASE WHEN bool_or(NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = d.parent_id)
                                          AND NOT EXISTS (SELECT FROM hopper_jobs AS p WHERE p.id = d.parent_id))
                              THEN 'purged' ELSE 'kept' END
                  FROM hopper_workflow_deps AS d
                  WHERE d.child_id = j.id AND d.parent_failed IS NOT NULL
                  HAVING count(*) > 0) AS failed
          FROM hopper_jobs AS j
          WHERE j.id = ANY (ready) AND j.state = 'waiting'
          OFFSET 0) AS v; -- OFFSET 0: each subquery runs once, not once per FILTER

    IF go IS NOT NULL THEN
        WITH promoted AS (
            UPDATE hopper_jobs AS j
            SET state = CASE WHEN j.run_at > clock THEN 'scheduled' ELSE 'pending' END,
                run_at = greatest(j.run_at, clock)
            WHERE j.id = ANY (go) AND j.state = 'waiting'
            RETURNING j.id, j.queue, j.state, j.priority, j.run_at
        )
        -- The wake-up names the place in claim order of each queue's
        -- first promoted job, as Notify does.
        SELECT count(hopper_wake('hopper_jobs', json_build_object(
                   'schema', current_schema(), 'queue', q.queue,
                   'priority', q.priority, 'run_at', q.run_at, 'id', q.id)::text)) INTO woken
        FROM (SELECT p.queue, min(p.priority) AS priority, min(p.run_at) AS run_at, min(p.id) AS id
              FROM promoted AS p
              WHERE p.state = 'pending'
              GROUP BY p.queue) AS q;
    END IF;

    IF doomed IS NOT NULL THEN
        WITH removed AS (
            DELETE FROM hopper_jobs AS j
            WHERE j.id = ANY (doomed) AND j.state = 'waiting'
            RETURNING j.*
        ), buried AS (
            INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts,
                                          unique_key, errors, reason, created_at, run_at, state, meta, concurrency_key)
            SELECT r.id, r.queue, r.kind, r.version, r.payload, r.priority, r.attempt, r.max_attempts,
                   r.unique_key, r.errors,
                   'parent ' || f.parent_id || ' ended ' || f.parent_failed
                   || CASE WHEN f.gone THEN ' and was purged' ELSE '' END,
                   r.created_at, r.run_at, 'cancelled', r.meta, r.concurrency_key
            FROM removed AS r
            CROSS JOIN LATERAL (SELECT d.parent_id, d.parent_failed,
                                       NOT EXISTS (SELECT FROM hopper_dead_jobs AS x WHERE x.id = d.parent_id)
                                       AND NOT EXISTS (SELECT FROM hopper_jobs AS p WHERE p.id = d.parent_id) AS gone
                                FROM hopper_workflow_deps AS d
                                WHERE d.child_id = r.id AND d.parent_failed IS NOT NULL
                                ORDER BY 3 DESC, d.parent_id
                                LIMIT 1) AS f
            RETURNING id
        )
        SELECT array_agg(b.id) INTO cancelled FROM buried AS b;
    END IF;

    -- A step that waits for an operator keeps its count (zero) for the
    -- retry of its parent to raise; the others need it no more.
    DELETE FROM hopper_workflow_waits AS w
    WHERE w.child_id = ANY (ready) AND NOT w.child_id = ANY (coalesce(held, '{}'));
    RETURN cancelled;
END;
$$;

-- CREATE OR REPLACE sets a function's settings anew: they are restated.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_wake(text, text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_notify_enqueued() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_emit_event(text, jsonb) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_durable_ended() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_promote(text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_promote_keys(text[]) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_workflow_decide(bigint[]) SET search_path = %1$I, pg_temp', current_schema());
END
$$;
ALTER FUNCTION hopper_durable_ended() SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_workflow_decide(bigint[]) SET plan_cache_mode = force_generic_plan;
