-- The SQL API: enqueue from any language, from triggers, from psql.
--
--   SELECT * FROM hopper_enqueue(kind => 'email', payload => '{"to": "a@b"}', delay => '5 minutes');
--   SELECT * FROM hopper_enqueue_many('[{"kind": "email", "payload": {}}, ...]');
--
-- A stable interface (docs/sql-api.md): the same checks, defaults and
-- words as Go's Kind.Enqueue and EnqueueBatch, the same statement shapes
-- (one INSERT … ON CONFLICT DO NOTHING per call), hence the same wake-ups
-- (the insert trigger). SECURITY INVOKER (the default): the caller's own
-- grants on hopper_jobs apply. Each function runs with search_path set to
-- the schema this migration ran in (the DO block at the end), so it finds
-- that schema's hopper_jobs whatever the caller's search_path is.
--
-- Refusals raise SQLSTATE 22023 (invalid_parameter_value) with Go's text
-- (`enqueue email: hopper: invalid priority: 12 is outside 0 (first) to 9
-- (last)`) and a HINT.
--
-- Guarded by: schema/TestSQLAPIMigration, schema/TestTriggerRules (the SQL API's rules),
-- jobs/TestSQLAPIAgreesWithGo, tests/TestSQLAPIFromPsql (and Python, Node),
-- schema/TestPLpgSQLCheck.

-- The Go duration text of an interval (Go's time.Duration.String: 5s,
-- 1m30s, 2h0m0s, 500ms), for errors that quote one.
CREATE FUNCTION hopper_go_duration(d interval) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    s numeric := abs(extract(epoch FROM d));
    sign text := CASE WHEN extract(epoch FROM d) < 0 THEN '-' ELSE '' END;
    h numeric;
    m numeric;
BEGIN
    IF s = 0 THEN
        RETURN '0s';
    ELSIF s < 0.001 THEN
        RETURN sign || trim_scale(s * 1000000) || 'µs';
    ELSIF s < 1 THEN
        RETURN sign || trim_scale(s * 1000) || 'ms';
    END IF;
    h := floor(s / 3600);
    m := floor((s - h * 3600) / 60);
    s := s - h * 3600 - m * 60;
    RETURN sign || CASE WHEN h > 0 THEN h || 'h' || m || 'm' WHEN m > 0 THEN m || 'm' ELSE '' END || trim_scale(s) || 's';
END;
$$;

-- How many bytes more than PostgreSQL Go's JSON text takes for the
-- characters it escapes where PostgreSQL does not: <, > and & (\u003c
-- for 1 byte) and U+2028, U+2029 (\u2028 for 3 bytes).
CREATE FUNCTION hopper_go_escapes(t text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT 5 * (length(t) - length(translate(t, '<>&', '')))
         + 3 * (length(t) - length(translate(t, chr(8232) || chr(8233), '')))
$$;

-- Checks one job as Go checks it (EnqueueRaw, then Kind.Enqueue's options,
-- in the same order, so that a job with two faults gets the same error)
-- and returns what to store: Hopper's defaults for NULL options, run_at
-- and state from the database's clock, an empty meta as none. prefix
-- starts an error's text: 'enqueue email: ', 'enqueue batch: item 3
-- (email): '; kind_prefix replaces it for a bad kind name.
CREATE FUNCTION hopper_enqueue_values(
    prefix text, kind_prefix text,
    kind text, payload jsonb, version integer, queue text, priority integer,
    run_at timestamptz, delay interval, unique_key text, max_attempts integer,
    meta jsonb, concurrency_key text,
    OUT o_queue text, OUT o_version integer, OUT o_priority smallint, OUT o_run_at timestamptz,
    OUT o_state text, OUT o_max_attempts integer, OUT o_meta jsonb)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_variable
DECLARE
    n integer;
    bad text;
    t text;
BEGIN
    n := coalesce(char_length(kind), 0);
    IF n = 0 OR n > 128 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = kind_prefix || 'hopper: invalid job kind definition: kind name "' || coalesce(kind, '') || '" '
                || CASE WHEN n = 0 THEN 'is empty' ELSE 'is ' || n || ' characters long, over the limit of 128' END,
            HINT = 'kind is the job kind''s name, as the worker''s handler is registered: 1 to 128 characters';
    END IF;
    o_version := coalesce(version, 1);
    IF o_version < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid job kind definition: version ' || o_version || ' is outside 1 to 2147483647',
            HINT = 'version is the payload''s version, 1 unless the kind''s payload has changed shape (jobs.Version)';
    END IF;
    IF payload IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: payload does not marshal to JSON: the payload is not valid JSON',
            HINT = 'payload is the job''s JSON, not NULL: pass ''{}'' for an empty object';
    END IF;

    o_queue := coalesce(queue, 'default');
    n := char_length(o_queue);
    IF n = 0 OR n > 128 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid queue name: queue name "' || o_queue || '" '
                || CASE WHEN n = 0 THEN 'is empty' ELSE 'is ' || n || ' characters long, over the limit of 128' END,
            HINT = 'a queue name has 1 to 128 characters; leave queue out (or NULL) for the queue named default';
    END IF;

    IF meta IS NOT NULL AND jsonb_typeof(meta) <> 'null' THEN
        IF jsonb_typeof(meta) <> 'object' THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = prefix || 'hopper: invalid metadata: a JSON ' || jsonb_typeof(meta) || ', not an object',
                HINT = 'meta is a JSON object of string tags, such as {"tenant": "acme"}';
        END IF;
        IF meta ? '' THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = prefix || 'hopper: invalid metadata: an empty key',
                HINT = 'meta is a JSON object of string tags, such as {"tenant": "acme"}';
        END IF;
        SELECT e.key INTO bad FROM jsonb_each(meta) AS e WHERE jsonb_typeof(e.value) <> 'string' ORDER BY e.key LIMIT 1;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = prefix || 'hopper: invalid metadata: key "' || bad || '": the value is not a string',
                HINT = 'meta is a JSON object of string tags, such as {"tenant": "acme"}: put numbers and the like in quotes';
        END IF;
        -- Go's count (jobs.Meta): its JSON text, in which <, > and & take
        -- 6 bytes (\u003c) and U+2028, U+2029 take 6, plus two bytes a key;
        -- PostgreSQL's text is one byte shorter than that.
        t := meta::text;
        n := octet_length(t) + 1 + hopper_go_escapes(t);
        IF n > 8192 THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = prefix || 'hopper: invalid metadata: ' || n || ' bytes as stored, over the limit of 8192',
                HINT = 'meta is for short tags; put data in the payload';
        END IF;
        IF meta <> '{}' THEN
            o_meta := meta;
        END IF;
    END IF;

    o_priority := CASE WHEN priority BETWEEN 0 AND 9 OR priority IS NULL THEN coalesce(priority, 0) END;
    IF o_priority IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid priority: ' || priority || ' is outside 0 (first) to 9 (last)',
            HINT = 'priority runs from 0 (runs first, the default) to 9 (runs last)';
    END IF;
    o_max_attempts := coalesce(max_attempts, 25);
    IF o_max_attempts < 1 OR o_max_attempts > 1073741824 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid max attempts: ' || o_max_attempts || ' (must be 1 or more)',
            HINT = 'max_attempts is how many times the job may be claimed before it is dead: 1 (no retries) to 1073741824; the default is 25';
    END IF;
    IF extract(epoch FROM delay) < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid run time: negative delay ' || hopper_go_duration(delay),
            HINT = 'delay is how long from now the job waits, such as ''5 minutes''; for a time, pass run_at';
    END IF;

    n := char_length(concurrency_key);
    IF n = 0 OR n > 255 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid concurrency key: '
                || CASE WHEN n = 0 THEN 'empty (leave the option out for no key)' ELSE n || ' characters long, over the limit of 255' END,
            HINT = 'a concurrency key has 1 to 255 characters; NULL is none';
    END IF;
    n := char_length(unique_key);
    IF n = 0 OR n > 512 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid unique key: '
                || CASE WHEN n = 0 THEN 'empty (leave the option out for no key)' ELSE n || ' characters long, over the limit of 512' END,
            HINT = 'a unique key has 1 to 512 characters; NULL is none';
    END IF;

    -- Go counts its compact JSON (json.Marshal): PostgreSQL's text plus
    -- Go's escapes (at most 6 bytes for 1), less the space after every
    -- colon and comma. Counted only for a payload that may be near the
    -- limit.
    t := payload::text;
    n := octet_length(t);
    IF n > 1048576 / 6 THEN
        n := n + hopper_go_escapes(t);
    END IF;
    IF n > 1048576 THEN
        SELECT n - coalesce(sum(CASE jsonb_typeof(v)
                   WHEN 'object' THEN greatest(2 * (SELECT count(*) FROM jsonb_object_keys(v)) - 1, 0)
                   WHEN 'array' THEN greatest(jsonb_array_length(v) - 1, 0)
                   ELSE 0 END), 0)
        INTO n
        FROM jsonb_path_query(payload, 'strict $.**') AS v;
    END IF;
    IF n > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: payload too large: ' || n || ' bytes encoded, over the limit of 1048576',
            HINT = 'keep payloads small: store large data elsewhere and pass its key';
    END IF;

    -- Enqueue's run_at: the later of run_at and now() + delay ("now" when
    -- neither is given), stored as scheduled when it is in the future.
    -- (Go sends the delay in whole milliseconds.)
    o_run_at := greatest(coalesce(run_at, '-infinity'), now() + date_trunc('milliseconds', coalesce(delay, '0')));
    o_state := CASE WHEN o_run_at > now() THEN 'scheduled' ELSE 'pending' END;
END;
$$;

-- One job: its id, and whether it was inserted. A live job holding
-- unique_key makes it a no-op that returns that job's id with inserted =
-- false (id NULL in the rare case that job is gone by the time it is
-- looked up, where Go's Result.ID is 0).
CREATE FUNCTION hopper_enqueue(
    kind text,
    payload jsonb,
    version integer DEFAULT 1,
    queue text DEFAULT 'default',
    priority integer DEFAULT 0,
    run_at timestamptz DEFAULT NULL,
    delay interval DEFAULT NULL,
    unique_key text DEFAULT NULL,
    max_attempts integer DEFAULT 25,
    meta jsonb DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    OUT id bigint,
    OUT inserted boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v record;
BEGIN
    SELECT * INTO v FROM hopper_enqueue_values(
        'enqueue ' || coalesce(hopper_enqueue.kind, '') || ': ', 'enqueue: ',
        hopper_enqueue.kind, hopper_enqueue.payload, hopper_enqueue.version, hopper_enqueue.queue,
        hopper_enqueue.priority, hopper_enqueue.run_at, hopper_enqueue.delay, hopper_enqueue.unique_key,
        hopper_enqueue.max_attempts, hopper_enqueue.meta, hopper_enqueue.concurrency_key);
    INSERT INTO hopper_jobs (queue, kind, version, payload, priority, run_at, state, max_attempts, unique_key, meta, concurrency_key)
    VALUES (v.o_queue, hopper_enqueue.kind, v.o_version, hopper_enqueue.payload, v.o_priority, v.o_run_at, v.o_state,
            v.o_max_attempts, hopper_enqueue.unique_key, v.o_meta, hopper_enqueue.concurrency_key)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING hopper_jobs.id INTO hopper_enqueue.id;
    hopper_enqueue.inserted := FOUND;
    IF NOT FOUND THEN
        -- A statement of its own, so a fresh snapshot (READ COMMITTED):
        -- it sees a holder that committed while the insert ran.
        SELECT live.id INTO hopper_enqueue.id FROM hopper_jobs AS live WHERE live.unique_key = hopper_enqueue.unique_key;
    END IF;
END;
$$;

-- A batch: jobs is a JSON array of objects with the fields of
-- hopper_enqueue's parameters (kind and payload required; run_at and delay
-- as text, '2026-12-01T09:00:00Z', '5 minutes'). All checked before any is
-- written, all inserted by one statement (one wake-up per queue), all or
-- nothing. One row per job, in the array's order: as hopper_enqueue's, and
-- a job whose key an earlier job of the batch holds gets that job's id.
CREATE FUNCTION hopper_enqueue_many(jobs jsonb)
RETURNS TABLE (id bigint, inserted boolean)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    job jsonb;
    i integer := 0;
    label text;
    unknown text;
    v record;
    kinds text[] := '{}';
    payloads jsonb[] := '{}';
    queues text[] := '{}';
    versions integer[] := '{}';
    priorities smallint[] := '{}';
    run_ats timestamptz[] := '{}';
    states text[] := '{}';
    attempts integer[] := '{}';
    unique_keys text[] := '{}';
    metas jsonb[] := '{}';
    keys text[] := '{}';
    ids bigint[];
    done boolean[];
    msg text;
    hint text;
    code text;
    slow boolean := false;
    fields constant text[] := '{kind,payload,version,queue,priority,run_at,delay,unique_key,max_attempts,meta,concurrency_key}';
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'enqueue batch: the jobs are ' || CASE WHEN jobs IS NULL THEN 'NULL' ELSE 'a JSON ' || jsonb_typeof(jobs) END || ', not a JSON array',
            HINT = 'pass a JSON array of objects, one a job: [{"kind": "email", "payload": {"to": "a@b"}}]';
    END IF;
    -- The jobs are checked by one statement, in the array's order, so the
    -- first bad job is the one its error names. Two faults are found job by
    -- job instead (the loop below), so that the error can name the job: an
    -- item that is not an object of hopper_enqueue's fields, and a field of
    -- the wrong type.
    BEGIN
        IF EXISTS (SELECT FROM jsonb_array_elements(jobs) AS e
                   WHERE jsonb_typeof(e) <> 'object'
                      OR EXISTS (SELECT FROM jsonb_object_keys(e) AS k WHERE k <> ALL (fields))) THEN
            slow := true;
        ELSE
            SELECT array_agg(e.job->>'kind' ORDER BY e.i), array_agg(e.job->'payload' ORDER BY e.i),
                   array_agg(v.o_queue ORDER BY e.i), array_agg(v.o_version ORDER BY e.i),
                   array_agg(v.o_priority ORDER BY e.i), array_agg(v.o_run_at ORDER BY e.i),
                   array_agg(v.o_state ORDER BY e.i), array_agg(v.o_max_attempts ORDER BY e.i),
                   array_agg(e.job->>'unique_key' ORDER BY e.i), array_agg(v.o_meta ORDER BY e.i),
                   array_agg(e.job->>'concurrency_key' ORDER BY e.i), count(*)
            INTO kinds, payloads, queues, versions, priorities, run_ats, states, attempts, unique_keys, metas, keys, i
            FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(job, i)
            CROSS JOIN LATERAL hopper_enqueue_values(
                'enqueue batch: item ' || (e.i - 1) || ' (' || coalesce(e.job->>'kind', '') || '): ',
                'enqueue batch: item ' || (e.i - 1) || ': ',
                e.job->>'kind', e.job->'payload', (e.job->>'version')::integer, e.job->>'queue',
                (e.job->>'priority')::integer, (e.job->>'run_at')::timestamptz, (e.job->>'delay')::interval,
                e.job->>'unique_key', (e.job->>'max_attempts')::integer, e.job->'meta', e.job->>'concurrency_key') AS v;
        END IF;
    EXCEPTION WHEN data_exception THEN
        GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE;
        IF code = '22023' THEN
            RAISE;
        END IF;
        slow := true;
    END;

    IF slow THEN
        i := 0;
        kinds := '{}'; payloads := '{}'; queues := '{}'; versions := '{}'; priorities := '{}'; run_ats := '{}';
        states := '{}'; attempts := '{}'; unique_keys := '{}'; metas := '{}'; keys := '{}';
        BEGIN
            FOR job IN SELECT e FROM jsonb_array_elements(jobs) AS e LOOP
                label := 'enqueue batch: item ' || i;
                IF jsonb_typeof(job) <> 'object' THEN
                    RAISE EXCEPTION USING ERRCODE = '22023',
                        MESSAGE = label || ': a JSON ' || jsonb_typeof(job) || ', not an object',
                        HINT = 'each job is an object: {"kind": "email", "payload": {"to": "a@b"}}';
                END IF;
                SELECT k INTO unknown FROM jsonb_object_keys(job) AS k WHERE k <> ALL (fields) ORDER BY k LIMIT 1;
                IF unknown IS NOT NULL THEN
                    RAISE EXCEPTION USING ERRCODE = '22023',
                        MESSAGE = label || ': unknown field "' || unknown || '"',
                        HINT = 'the fields are hopper_enqueue''s parameters: kind, payload, version, queue, priority, run_at, delay, unique_key, max_attempts, meta, concurrency_key';
                END IF;
                SELECT * INTO v FROM hopper_enqueue_values(
                    label || ' (' || coalesce(job->>'kind', '') || '): ', label || ': ',
                    job->>'kind', job->'payload', (job->>'version')::integer, job->>'queue',
                    (job->>'priority')::integer, (job->>'run_at')::timestamptz, (job->>'delay')::interval,
                    job->>'unique_key', (job->>'max_attempts')::integer, job->'meta', job->>'concurrency_key');
                kinds := array_append(kinds, (job->>'kind'));
                payloads := array_append(payloads, (job->'payload'));
                queues := array_append(queues, v.o_queue);
                versions := array_append(versions, v.o_version);
                priorities := array_append(priorities, v.o_priority);
                run_ats := array_append(run_ats, v.o_run_at);
                states := array_append(states, v.o_state);
                attempts := array_append(attempts, v.o_max_attempts);
                unique_keys := array_append(unique_keys, (job->>'unique_key'));
                metas := array_append(metas, v.o_meta);
                keys := array_append(keys, (job->>'concurrency_key'));
                i := i + 1;
            END LOOP;
        EXCEPTION WHEN data_exception THEN
            GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT, code = RETURNED_SQLSTATE;
            IF code = '22023' THEN
                RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg, HINT = hint;
            END IF;
            -- A field of the wrong type ("priority": "high", "delay": "soon").
            RAISE EXCEPTION USING ERRCODE = code, MESSAGE = label || ': ' || msg,
                HINT = 'version, priority and max_attempts are integers; run_at a timestamptz and delay an interval, as text';
        END;
    END IF;

    IF i = 0 THEN
        RETURN;
    END IF;
    IF cardinality(array_remove(unique_keys, NULL)) = 0 THEN
        -- No unique keys (Go's EnqueueBatchPlain): every job is inserted,
        -- and the identity gives the ids in the batch's order.
        RETURN QUERY
        WITH ins AS (
            INSERT INTO hopper_jobs (queue, kind, version, payload, priority, run_at, state, max_attempts, meta, concurrency_key)
            SELECT b.queue, b.kind, b.version, b.payload, b.priority, b.run_at, b.state, b.max_attempts, b.meta, b.concurrency_key
            FROM unnest(kinds, payloads, queues, versions, priorities, run_ats, states, attempts, metas, keys)
                WITH ORDINALITY AS b(kind, payload, queue, version, priority, run_at, state, max_attempts, meta, concurrency_key, ord)
            ORDER BY b.ord
            RETURNING hopper_jobs.id
        )
        SELECT ins.id, true FROM ins ORDER BY ins.id;
        RETURN;
    END IF;
    -- Ids are taken first, in the batch's order, so that every job of the
    -- batch is named whether it was inserted or not (as Go's
    -- EnqueueBatchUnique does); an earlier job of the batch wins a key.
    WITH seq AS MATERIALIZED ( -- looked up once
        SELECT pg_get_serial_sequence('hopper_jobs', 'id')::regclass AS id
    ), batch AS MATERIALIZED (
        SELECT b.*, nextval(seq.id) AS id
        FROM seq, unnest(kinds, payloads, queues, versions, priorities, run_ats, states, attempts, unique_keys, metas, keys)
            WITH ORDINALITY AS b(kind, payload, queue, version, priority, run_at, state, max_attempts, unique_key, meta, concurrency_key, ord)
    ), ins AS (
        INSERT INTO hopper_jobs (id, queue, kind, version, payload, priority, run_at, state, max_attempts, unique_key, meta, concurrency_key)
        OVERRIDING SYSTEM VALUE
        SELECT b.id, b.queue, b.kind, b.version, b.payload, b.priority, b.run_at, b.state, b.max_attempts, b.unique_key, b.meta, b.concurrency_key
        FROM batch AS b
        ORDER BY b.id
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING hopper_jobs.id
    )
    SELECT array_agg(b.id ORDER BY b.ord), array_agg(ins.id IS NOT NULL ORDER BY b.ord)
    INTO ids, done
    FROM batch AS b
    LEFT JOIN ins ON ins.id = b.id;
    -- A statement of its own, so a fresh snapshot (READ COMMITTED): a
    -- skipped job's key is held by an earlier job of the batch, or by a
    -- live job, perhaps one that committed while the insert ran.
    RETURN QUERY
    SELECT CASE WHEN r.done THEN r.id
                ELSE (SELECT live.id FROM hopper_jobs AS live WHERE live.unique_key = r.unique_key) END,
           r.done
    FROM unnest(ids, done, unique_keys) WITH ORDINALITY AS r(id, done, unique_key, ord)
    ORDER BY r.ord;
END;
$$;

-- Each function finds this schema's tables (and the functions it calls)
-- whatever the caller's search_path: its own is this schema, where the
-- migration runs (pg_temp last, so a temporary table cannot stand in for
-- hopper_jobs).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_enqueue_values(text, text, text, jsonb, integer, text, integer, timestamptz, interval, text, integer, jsonb, text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_enqueue(text, jsonb, integer, text, integer, timestamptz, interval, text, integer, jsonb, text) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_enqueue_many(jsonb) SET search_path = %1$I, pg_temp', current_schema());
END;
$$;
