-- Dead jobs by partitions, step 3 of 3: dead jobs in time partitions.
--
-- hopper_dead_jobs becomes a table partitioned by range of partition_at
-- (migration 22), as the history did in migration 21. Workers whose
-- DeadRetention is set create partitions ahead (hopper_dead_partitions_ensure)
-- and drop those whose every job died longer ago than the retention
-- (hopper_dead_partitions_drop): dead and cancelled jobs go by a DROP
-- TABLE instead of a DELETE, a dead tuple and an index entry per row. A
-- job is kept at least the retention and at most one partition's width
-- longer.
--
-- Where a row goes is decided by the column's default, so that every
-- statement that moves a job into hopper_dead_jobs (failing, cancelling,
-- the sweep, the SQL API, and the previous build's statements, which do
-- not know the column) needs no change: hopper_dead_partition_at gives the
-- statement's time when a partition covers it, and NULL (the default
-- partition) when none does.
--
-- The table as it was becomes the default partition,
-- hopper_dead_jobs_default, without being read or copied (see migration
-- 21); it keeps its indexes' names and its rows, which the pruner deletes
-- as before. The parent carries the four indexes readers search, matched
-- by the default partition's own at attach time, and the state check. A
-- partitioned table's primary key must contain the partition key, so each
-- partition has its own on id (ids come from hopper_jobs' identity; a job
-- is dead once at a time).
--
-- The three AFTER DELETE triggers (durable records, workflow children,
-- the isolation check) move to the parent: a statement's triggers fire
-- for the table it names, and every DELETE names hopper_dead_jobs. Their
-- transition tables hold the rows of every partition the statement
-- deleted from.
--
-- hopper_dead_partitions lists the partitions, contiguous from the
-- oldest to the newest.
--
-- Locks: the rename, the triggers' move and the attach hold the table's
-- ACCESS EXCLUSIVE lock for milliseconds (docs/upgrading.md); nothing is
-- scanned.
--
-- Guarded by: schema/TestDeadPartitionsMigration,
-- schema/TestDeadPartitionFunctions, worker/TestPrunerDropsDeadPartitions,
-- tests/upgrade.
ALTER TABLE hopper_dead_jobs RENAME TO hopper_dead_jobs_default;
DROP TRIGGER hopper_dead_jobs_durable_ended ON hopper_dead_jobs_default;
DROP TRIGGER hopper_dead_jobs_isolation_delete ON hopper_dead_jobs_default;
DROP TRIGGER hopper_dead_jobs_workflow_purged ON hopper_dead_jobs_default;

CREATE TABLE hopper_dead_partitions (
    name     text        PRIMARY KEY,
    lower_at timestamptz NOT NULL UNIQUE,
    upper_at timestamptz NOT NULL UNIQUE,
    CHECK (lower_at < upper_at)
);

-- hopper_dead_partition_at is at when a dead-job partition covers it, or
-- NULL: the partition key a row gets by default. It reads the list as
-- its owner, so that whoever may insert a dead job needs no grant on it.
-- Its body is bound to the list when it is created (BEGIN ATOMIC), so no
-- caller's search_path can redirect it, and it needs no SET search_path,
-- which would cost each dead job a quarter more.
CREATE FUNCTION hopper_dead_partition_at(at timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER
BEGIN ATOMIC
    SELECT at FROM hopper_dead_partitions AS p
    WHERE p.lower_at <= at AND at < p.upper_at;
END;

CREATE TABLE hopper_dead_jobs (LIKE hopper_dead_jobs_default INCLUDING DEFAULTS)
    PARTITION BY RANGE (partition_at);
ALTER TABLE hopper_dead_jobs
    ALTER COLUMN partition_at SET DEFAULT hopper_dead_partition_at(statement_timestamp()),
    ADD CONSTRAINT hopper_dead_jobs_state_check CHECK (state = ANY (ARRAY['dead', 'cancelled']));
CREATE INDEX hopper_dead_jobs_all_died_at_idx ON hopper_dead_jobs (died_at);
CREATE INDEX hopper_dead_jobs_all_kind_idx ON hopper_dead_jobs (kind, queue);
CREATE INDEX hopper_dead_jobs_all_unique_key_idx ON hopper_dead_jobs (unique_key)
    WHERE unique_key IS NOT NULL;
CREATE INDEX hopper_dead_jobs_all_workflow_idx ON hopper_dead_jobs ((meta ->> 'hopper.workflow'), id)
    WHERE meta ? 'hopper.workflow';
ALTER TABLE hopper_dead_jobs ATTACH PARTITION hopper_dead_jobs_default DEFAULT;

CREATE TRIGGER hopper_dead_jobs_durable_ended AFTER DELETE ON hopper_dead_jobs
    REFERENCING OLD TABLE AS hopper_ended_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION hopper_durable_ended('hopper_jobs');
CREATE TRIGGER hopper_dead_jobs_isolation_delete AFTER DELETE ON hopper_dead_jobs
    REFERENCING OLD TABLE AS hopper_isolation_rows
    FOR EACH STATEMENT EXECUTE FUNCTION hopper_isolation_check();
CREATE TRIGGER hopper_dead_jobs_workflow_purged AFTER DELETE ON hopper_dead_jobs
    REFERENCING OLD TABLE AS hopper_purged_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION hopper_workflow_purged();

-- Whoever could use the dead jobs keeps the same grants on them, and may
-- read the list of partitions.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT a.privilege_type AS privilege,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS grantee
        FROM pg_class AS c, aclexplode(c.relacl) AS a
        WHERE c.oid = 'hopper_dead_jobs_default'::regclass AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON hopper_dead_jobs TO %s', g.privilege, g.grantee);
        IF g.privilege = 'SELECT' THEN
            EXECUTE format('GRANT SELECT ON hopper_dead_partitions TO %s', g.grantee);
        END IF;
    END LOOP;
END;
$$;

-- The view named the old table by its identity; it now reads the parent.
CREATE OR REPLACE VIEW hopper_all_jobs AS
SELECT j.id, j.queue, j.kind, j.version, j.payload, j.state, j.priority, j.run_at,
       j.attempt, j.max_attempts, j.lease_owner, j.lease_until, j.unique_key, j.errors,
       j.created_at, NULL::timestamptz AS finished_at, NULL::text AS reason, NULL::jsonb AS result,
       j.meta, j.concurrency_key
FROM hopper_jobs AS j
UNION ALL
SELECT d.id, d.queue, d.kind, d.version, d.payload, d.state, d.priority, d.run_at,
       d.attempt, d.max_attempts, NULL::text, NULL::timestamptz, d.unique_key, d.errors,
       d.created_at, d.died_at, d.reason, NULL::jsonb, d.meta, d.concurrency_key
FROM hopper_dead_jobs AS d
UNION ALL
SELECT h.id, h.queue, h.kind, h.version, h.payload, 'completed'::text, h.priority, h.run_at,
       h.attempt, h.max_attempts, NULL::text, NULL::timestamptz, h.unique_key, h.errors,
       h.created_at, h.finished_at, NULL::text, h.result, h.meta, h.concurrency_key
FROM hopper_job_history AS h;

-- hopper_dead_partitions_ensure creates dead-job partitions of the given
-- width until they cover now() + ahead, at most 100 per call, and returns
-- how many it created: contiguous, each starting where the newest ends,
-- the first at now() rounded down to the width, as
-- hopper_history_partitions_ensure (migration 21) does for the history.
-- Attaching locks the parent in SHARE UPDATE EXCLUSIVE mode, so reads and
-- writes go on; the default partition is locked for the attach's instant.
CREATE FUNCTION hopper_dead_partitions_ensure(width interval, ahead interval) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET lock_timeout = '2s' SET timezone = 'UTC' SET datestyle = 'ISO, YMD'
AS $$
DECLARE
    width_s double precision := extract(epoch FROM width);
    newest  timestamptz;
    from_at timestamptz;
    to_at   timestamptz;
    part    text;
    made    integer := 0;
BEGIN
    IF width IS NULL OR width < interval '1 minute' OR width > interval '31 days' THEN
        RAISE EXCEPTION 'hopper: partition width %: it must be between 1 minute and 31 days', width
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF ahead IS NULL OR ahead < interval '0' OR ahead > interval '400 days' THEN
        RAISE EXCEPTION 'hopper: partitions ahead %: it must be between 0 and 400 days', ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    LOCK TABLE hopper_dead_partitions IN SHARE ROW EXCLUSIVE MODE;
    SELECT max(p.upper_at) INTO newest FROM hopper_dead_partitions AS p;
    WHILE (newest IS NULL OR newest < now() + ahead) AND made < 100 LOOP
        from_at := to_timestamp(floor(extract(epoch FROM now()) / width_s) * width_s);
        IF newest IS NOT NULL THEN
            to_at := greatest(newest + width, from_at + width);
            from_at := newest;
        ELSE
            to_at := from_at + width;
        END IF;
        part := 'hopper_dead_jobs_' || to_char(from_at, 'YYYYMMDD"t"HH24MISS');
        EXECUTE format('CREATE TABLE %I (LIKE hopper_dead_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
        EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id)', part);
        EXECUTE format('ALTER TABLE hopper_dead_jobs ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       part, from_at, to_at);
        INSERT INTO hopper_dead_partitions (name, lower_at, upper_at) VALUES (part, from_at, to_at);
        newest := to_at;
        made := made + 1;
    END LOOP;
    RETURN made;
END;
$$;

-- hopper_dead_partitions_drop drops the partitions whose every job died
-- longer ago than retention (the range's upper bound is that old), the
-- oldest first, and returns how many.
--
-- A DROP fires no trigger, so the jobs a trigger has work for (durable
-- records, workflow steps whose children wait, jobs a caller awaits) are
-- deleted first, through the parent and with their workflow edges, as
-- PurgeDead deletes them; that reads the partition but deletes only those
-- few. It happens before the parent's ACCESS EXCLUSIVE lock is taken,
-- because the triggers lock rows of hopper_jobs, which a worker moving a
-- job to the dead jobs holds while it waits for the parent; once the lock
-- is held, a partition that received such a job meanwhile (a statement
-- older than the retention) is skipped until the next call. The lock is
-- held for the drops' milliseconds; lock_timeout bounds the wait for it,
-- and a call that times out drops nothing.
CREATE FUNCTION hopper_dead_partitions_drop(retention interval) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET lock_timeout = '2s'
AS $$
DECLARE
    p       record;
    marked  bigint[];
    late    boolean;
    dropped integer := 0;
BEGIN
    IF retention IS NULL OR retention < interval '1 minute' THEN
        RAISE EXCEPTION 'hopper: dead job retention %: partitions are dropped only for a retention of 1 minute or more', retention
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM hopper_dead_partitions AS d WHERE d.upper_at + retention <= now()) THEN
        RETURN 0;
    END IF;
    LOCK TABLE hopper_dead_partitions IN SHARE ROW EXCLUSIVE MODE;
    FOR p IN SELECT d.name FROM hopper_dead_partitions AS d
             WHERE d.upper_at + retention <= now() ORDER BY d.lower_at LIMIT 100 LOOP
        EXECUTE format('SELECT array_agg(x.id) FROM %I AS x '
                       'WHERE x.meta ?| ARRAY[''hopper.workflow'', ''hopper.durable'', ''hopper.awaited'']', p.name)
            INTO marked;
        IF marked IS NOT NULL THEN
            DELETE FROM hopper_workflow_deps AS e WHERE e.child_id = ANY (marked);
            DELETE FROM hopper_dead_jobs AS x WHERE x.id = ANY (marked);
        END IF;
    END LOOP;
    LOCK TABLE hopper_dead_jobs IN ACCESS EXCLUSIVE MODE;
    FOR p IN SELECT d.name FROM hopper_dead_partitions AS d
             WHERE d.upper_at + retention <= now() ORDER BY d.lower_at LIMIT 100 LOOP
        EXECUTE format('SELECT EXISTS (SELECT FROM %I AS x '
                       'WHERE x.meta ?| ARRAY[''hopper.workflow'', ''hopper.durable'', ''hopper.awaited''])', p.name)
            INTO late;
        CONTINUE WHEN late;
        EXECUTE format('DROP TABLE %I', p.name);
        DELETE FROM hopper_dead_partitions AS d WHERE d.name = p.name;
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END;
$$;

-- A SECURITY DEFINER function must not find its names through the
-- caller's search_path: these run in this schema, whoever calls them.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_dead_partitions_ensure(interval, interval) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_dead_partitions_drop(interval) SET search_path = %1$I, pg_temp', current_schema());
END;
$$;

-- The functions that read the history or the dead jobs by id run their
-- statements with generic plans. Left to choose, PostgreSQL's plan cache
-- keeps planning those statements anew at every call (a custom plan),
-- and planning a lookup across every partition costs ten times the
-- lookup: 2,000 calls of a workflow step's two probes took 2.85 s with
-- custom plans over 26 history and 12 dead partitions, 0.21 s with a
-- generic plan (0.04 s without partitions). A generic plan is made once
-- per session, and again after each partition attached or dropped.
ALTER FUNCTION hopper_durable_ended() SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_sequence_advance() SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_workflow_advance() SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_workflow_count(bigint[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_workflow_decide(bigint[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_workflow_link(bigint[], bigint[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_workflow_pass(bigint[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION hopper_workflow_retry(text) SET plan_cache_mode = force_generic_plan;
