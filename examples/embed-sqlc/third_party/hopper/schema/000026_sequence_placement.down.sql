-- Back to migration 13's placement: fired for every new job of a
-- sequence, and keyed by the statement trigger only (so again with no
-- placement under SET CONSTRAINTS ... IMMEDIATE).
LOCK TABLE hopper_jobs IN ACCESS EXCLUSIVE MODE;

DROP TRIGGER hopper_jobs_sequence_place ON hopper_jobs;

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
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION hopper_sequence_place() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    setting constant text := 'hopper.sequence_keys_' || TG_RELID::text;
    keys text[];
    firsts bigint[];
    before bigint[];
    locked bigint;
BEGIN
    SELECT array_agg(e.key ORDER BY e.key), array_agg(e.value::bigint ORDER BY e.key) INTO keys, firsts
    FROM jsonb_each_text(coalesce(nullif(current_setting(setting, true), ''), '{}')::jsonb) AS e;
    IF keys IS NULL THEN
        RETURN NULL;
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
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER hopper_jobs_sequence_place
    AFTER INSERT ON hopper_jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.meta ? 'hopper.sequence')
    EXECUTE FUNCTION hopper_sequence_place();

DROP FUNCTION hopper_sequence_place_keys(oid);
DROP FUNCTION hopper_sequence_place_queue(oid, jsonb);

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_place() SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_sequence_collect() SET search_path = %1$I, pg_temp', current_schema());
END
$$;
