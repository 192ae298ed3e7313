-- Values the SQL API accepted that Go cannot read back (docs/sql-api.md):
-- run_at => 'infinity' (and a time after the year 9998, or a delay that
-- reaches one) was stored, the job never fell due, and every GetJob,
-- ListJobs, dashboard page and `hopper jobs list` holding it failed
-- ("cannot scan Infinity into *time.Time", or Go's JSON, which writes years
-- 0 to 9999 only). The SQL API now refuses them as Go's Kind.Enqueue does,
-- and a check on hopper_jobs keeps raw INSERTs from storing them.
--
-- Guarded by: schema/TestSQLAPIInputsMigration, schema/TestTriggerRules,
-- jobs/TestSQLAPIRefusesWhatGoCannotSay, jobs/TestSQLAPIStoresTimesGoReads,
-- schema/TestPLpgSQLCheck.

-- run_at between the year 1 and the end of the year 9998 (UTC): read back
-- in any time zone, a year Go formats (0 to 9999). Added NOT VALID first,
-- so that no new row escapes it while the old ones are moved into range.
ALTER TABLE hopper_jobs
    ADD CONSTRAINT hopper_jobs_run_at_check
    CHECK (run_at >= timestamptz '0001-01-01 00:00:00+00' AND run_at < timestamptz '9999-01-01 00:00:00+00') NOT VALID;

-- Rows stored before (a job due at 'infinity', in any of the three job
-- tables) move into range, which the VALIDATE below then finds: a job due
-- at infinity or in the year 9999 or later stays as far away as it can,
-- the last microsecond of 9998 (it was never going to run: an operator
-- now sees it, and can run it now, edit or delete it); one due before the
-- year 1 (-infinity, by hand) is due at the start of the year 1, first in
-- claim order as it was.
UPDATE hopper_jobs
SET run_at = CASE WHEN run_at < timestamptz '0001-01-01 00:00:00+00' THEN timestamptz '0001-01-01 00:00:00+00'
                  ELSE timestamptz '9998-12-31 23:59:59.999999+00' END
WHERE NOT (run_at >= timestamptz '0001-01-01 00:00:00+00' AND run_at < timestamptz '9999-01-01 00:00:00+00');
UPDATE hopper_dead_jobs
SET run_at = CASE WHEN run_at < timestamptz '0001-01-01 00:00:00+00' THEN timestamptz '0001-01-01 00:00:00+00'
                  ELSE timestamptz '9998-12-31 23:59:59.999999+00' END
WHERE NOT (run_at >= timestamptz '0001-01-01 00:00:00+00' AND run_at < timestamptz '9999-01-01 00:00:00+00');
UPDATE hopper_job_history
SET run_at = CASE WHEN run_at < timestamptz '0001-01-01 00:00:00+00' THEN timestamptz '0001-01-01 00:00:00+00'
                  ELSE timestamptz '9998-12-31 23:59:59.999999+00' END
WHERE NOT (run_at >= timestamptz '0001-01-01 00:00:00+00' AND run_at < timestamptz '9999-01-01 00:00:00+00');

ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_run_at_check;

-- The SQL API's checks (migration 12's, renamed by migration 13), with
-- run_at and delay bounded. The same as before otherwise, word for word.
CREATE OR REPLACE FUNCTION hopper_enqueue_values_checked(
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
    late boolean := false;
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
            MESSAGE = prefix || 'hopper: invalid run time: negative delay '
                || CASE WHEN isfinite(delay) THEN hopper_go_duration(delay) ELSE '-infinity' END,
            HINT = 'delay is how long from now the job waits, such as ''5 minutes''; for a time, pass run_at';
    END IF;
    -- A time Go reads back (migration 16): before the year 9999 in UTC,
    -- hence in every time zone a year Go's time.Time formats as JSON and
    -- RFC 3339 (0 to 9999). 'infinity' is no time: a job due then would
    -- never run, and every listing holding it would fail. A past time,
    -- -infinity included, means now. The delay's bound is checked on its
    -- seconds first, so that now() + delay cannot overflow PostgreSQL's
    -- range, then on the time it makes.
    IF run_at >= timestamptz '9999-01-01 00:00:00+00' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid run time: run_at is in the year 9999 or later',
            HINT = 'run_at is a time before 9999-01-01 00:00 UTC (a past one, or -infinity, means now); a job that must not run yet is enqueued when it may';
    END IF;
    IF NOT isfinite(delay)
       OR extract(epoch FROM delay) >= extract(epoch FROM timestamptz '9999-01-01 00:00:00+00') - extract(epoch FROM now()) THEN
        late := true;
    ELSIF now() + date_trunc('milliseconds', delay) >= timestamptz '9999-01-01 00:00:00+00' THEN
        late := true;
    END IF;
    IF late THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = prefix || 'hopper: invalid run time: delay ends in the year 9999 or later',
            HINT = 'delay is how long from now the job waits, such as ''5 minutes'', ending before 9999-01-01 00:00 UTC';
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

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_enqueue_values_checked(text, text, text, jsonb, integer, text, integer, timestamptz, interval, text, integer, jsonb, text) SET search_path = %1$I, pg_temp', current_schema());
END;
$$;
