-- A commit's placement of its new sequence jobs runs once, and also when
-- the application makes constraints IMMEDIATE.
--
-- Since migration 13 the placement was a deferred constraint trigger
-- fired for every new job of a sequence: the first firing placed every
-- key the transaction wrote to, and the others, one per job, found
-- nothing left. Those empty firings cost about 10 µs a job (a call with
-- its own search_path, a setting read and parsed): a commit of 5,000 jobs
-- in 1,000 keys took 86–119 ms, 32–87 ms with one firing.
--
-- And under SET CONSTRAINTS ... IMMEDIATE the placement fired at the end
-- of the inserting statement, before the statement trigger that records
-- the statement's keys (PostgreSQL fires row events before statement
-- events): it found no key, and the new jobs of a key without a head all
-- stayed waiting until a later commit of the same key placed them.
--
-- Now the trigger's WHEN queues the placement for the transaction's first
-- new sequence job only (hopper_sequence_place_queue notes it in a
-- transaction-local setting, which a rolled-back savepoint takes back
-- with the event it queued); the placement clears the note when it fires,
-- so that a job inserted after it queues another. hopper_sequence_collect
-- places its statement's keys itself when no placement is queued at its
-- end: the constraint is IMMEDIATE and its event has fired already.
--
-- The job table is locked ACCESS EXCLUSIVE first (DROP TRIGGER's lock),
-- so that no weaker lock is ever upgraded. Guarded by:
-- TestSequencePlacementFiresOnce, TestSequencesUnderImmediateConstraints.
LOCK TABLE hopper_jobs IN ACCESS EXCLUSIVE MODE;

-- True for a transaction's first new job of a sequence in job_table (and
-- again for the first one after a placement), false otherwise. A plain SQL
-- function with no settings, so that PostgreSQL inlines it into the
-- trigger's WHEN, evaluated for every inserted job: it reads no table, so
-- it needs no search_path. A CASE, so that the setting is written only
-- for a job of a sequence.
CREATE FUNCTION hopper_sequence_place_queue(job_table oid, meta jsonb) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT CASE
        WHEN NOT coalesce(meta ? 'hopper.sequence', false) THEN false
        WHEN current_setting('hopper.sequence_place_' || job_table::text, true) = 'queued' THEN false
        ELSE set_config('hopper.sequence_place_' || job_table::text, 'queued', true) = 'queued'
    END
$$;

-- Places the keys the transaction's statements recorded (migration 13's
-- placement, unchanged, now called once per commit): with the keys' locks
-- held (in one hash order), for each key the job whose end will make the
-- first new job the first waiting one (hopper_sequence_before) is locked
-- FOR KEY SHARE until the commit, in id order, so that it cannot end
-- before the new jobs are visible; a job that ended before it was locked
-- makes the round run again. A key with no head and no block gets one:
-- its first waiting job. A dead head that came back (a retry) lifts its
-- block.
CREATE FUNCTION hopper_sequence_place_keys(job_table oid) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    setting constant text := 'hopper.sequence_keys_' || job_table::text;
    keys text[];
    firsts bigint[];
    before bigint[];
    locked bigint;
BEGIN
    SELECT array_agg(e.key ORDER BY e.key), array_agg(e.value::bigint ORDER BY e.key) INTO keys, firsts
    FROM jsonb_each_text(coalesce(nullif(current_setting(setting, true), ''), '{}')::jsonb) AS e;
    IF keys IS NULL THEN
        RETURN;
    END IF;
    PERFORM set_config(setting, '', true);
    PERFORM count(pg_advisory_xact_lock(l.id))
    FROM (SELECT DISTINCT hopper_sequence_lock_id(k) AS id FROM unnest(keys) AS k ORDER BY 1) AS l;
    DELETE FROM hopper_sequence_blocks AS b
    WHERE b.sequence_key = ANY (keys) AND EXISTS (SELECT FROM hopper_jobs AS j WHERE j.id = b.job_id);
    FOR round IN 1..100 LOOP
        SELECT coalesce(array_agg(b.id), '{}') INTO before
        FROM (SELECT hopper_sequence_before(k.key, k.first) AS id FROM unnest(keys, firsts) AS k(key, first)) AS b
        WHERE b.id IS NOT NULL;
        SELECT count(*) INTO locked
        FROM (SELECT j.id FROM hopper_jobs AS j
              WHERE j.id = ANY (before)
              ORDER BY j.id
              FOR KEY SHARE OF j) AS l;
        -- A job gone since the statement before (ended meanwhile, or while
        -- this waited for its lock) is not locked: look again.
        EXIT WHEN locked = cardinality(before);
        IF round = 100 THEN
            RAISE EXCEPTION 'hopper: sequences: the jobs ahead of % kept changing while this commit locked them', keys;
        END IF;
    END LOOP;
    SELECT array_agg(k) INTO keys
    FROM unnest(keys) AS k
    WHERE NOT EXISTS (SELECT FROM hopper_jobs AS j
                      WHERE (j.meta ->> 'hopper.sequence') = k AND j.state <> 'waiting' AND j.meta ? 'hopper.sequence')
      AND NOT EXISTS (SELECT FROM hopper_sequence_blocks AS b WHERE b.sequence_key = k);
    IF keys IS NOT NULL THEN
        PERFORM hopper_sequence_promote_keys(keys);
    END IF;
END;
$$;

-- The deferred placement, at commit (or at the end of the statement when
-- the constraint is IMMEDIATE): a job inserted after it queues another.
CREATE OR REPLACE FUNCTION hopper_sequence_place() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM set_config('hopper.sequence_place_' || TG_RELID::text, '', true);
    PERFORM hopper_sequence_place_keys(TG_RELID);
    RETURN NULL;
END;
$$;

-- Each inserting statement notes, for each sequence key of its new jobs,
-- the smallest new id, in a transaction-local setting (one per schema:
-- the name carries the job table's oid), for the placement. When none is
-- queued now, the constraint is IMMEDIATE and the placement this
-- statement queued fired before this trigger: the keys are placed here.
CREATE OR REPLACE FUNCTION hopper_sequence_collect() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    setting constant text := 'hopper.sequence_keys_' || TG_RELID::text;
    firsts jsonb;
BEGIN
    IF NOT EXISTS (SELECT FROM hopper_new_jobs AS n WHERE n.meta ? 'hopper.sequence') THEN
        RETURN NULL;
    END IF;
    SELECT jsonb_object_agg(f.key, f.first) INTO firsts
    FROM (SELECT a.key, min(a.id) AS first
          FROM (SELECT n.meta ->> 'hopper.sequence' AS key, n.id
                FROM hopper_new_jobs AS n
                WHERE n.meta ? 'hopper.sequence'
                UNION ALL
                SELECT e.key, e.value::bigint
                FROM jsonb_each_text(coalesce(nullif(current_setting(setting, true), ''), '{}')::jsonb) AS e) AS a
          GROUP BY a.key) AS f;
    PERFORM set_config(setting, firsts::text, true);
    IF current_setting('hopper.sequence_place_' || TG_RELID::text, true) IS DISTINCT FROM 'queued' THEN
        PERFORM hopper_sequence_place_keys(TG_RELID);
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER hopper_jobs_sequence_place ON hopper_jobs;
CREATE CONSTRAINT TRIGGER hopper_jobs_sequence_place
    AFTER INSERT ON hopper_jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (hopper_sequence_place_queue(NEW.tableoid, NEW.meta))
    EXECUTE FUNCTION hopper_sequence_place();

-- CREATE OR REPLACE sets a function's settings anew: the pins are restated.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_place() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_collect() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_place_keys(oid) SET search_path = %1$I, pg_temp', current_schema());
END
$$;
