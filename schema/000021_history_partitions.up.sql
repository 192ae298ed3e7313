-- Retention by partitions, step 3 of 3: the history in time partitions.
--
-- hopper_job_history becomes a table partitioned by range of drop_after
-- (migration 19). Workers create partitions ahead of time
-- (hopper_history_partitions_ensure) and drop those whose range has
-- passed (hopper_history_partitions_drop): a completed job kept until T
-- goes, with every other row of its partition, by a DROP TABLE once the
-- partition's upper bound has passed, instead of by a DELETE, a dead
-- tuple and an index entry per row. A row is kept at least until its
-- keep_until and at most one partition's width longer; a job kept for
-- less than a partition's width goes to the default partition instead.
--
-- The table as it was becomes the default partition,
-- hopper_job_history_default, without being read or copied: attaching a
-- default partition to a table that has no other partition proves
-- nothing, and the check of migrations 19 and 20 (drop_after IS NULL)
-- proves, for every partition attached later, that the default holds
-- none of its rows. It keeps the rows written before this migration,
-- rows written by builds that do not know drop_after, and rows kept
-- beyond the partitions created so far; the pruner deletes those as
-- before (PruneHistory reads only the default partition).
--
-- What the parent carries: the two partial indexes readers search
-- (unique keys, workflow steps), matched by the default partition's own
-- at attach time (nothing is built). The default partition's indexes
-- keep their names. A partitioned table's primary key
-- must contain the partition key, so the parent has none: each partition
-- has its own on id (ids come from one identity and a job enters the
-- history once). keep_until is indexed in the default partition only:
-- the others are dropped, not searched by expiry.
--
-- hopper_history_partitions lists the partitions, contiguous from the
-- oldest to the newest; AckBatchKeep looks a row's keep_until up in it:
-- a partition covers it and is no wider than the keep (drop_after =
-- keep_until), or not (drop_after NULL: the default partition, where the
-- row is deleted when its keep ends).
--
-- The functions are SECURITY DEFINER so that a worker that may only read
-- and write Hopper's tables (docs/operating.md, Least privilege) can
-- still create and drop partitions, which needs the owner; they take
-- no input but two intervals, and drop only partitions whose range has
-- passed.
--
-- Locks: the rename and the attach hold the table's ACCESS EXCLUSIVE
-- lock for milliseconds (measured in docs/upgrading.md); nothing is
-- scanned.
--
-- Guarded by: schema/TestHistoryPartitionsMigration,
-- schema/TestHistoryPartitionFunctions, worker/TestPrunerDropsPartitions,
-- tests/upgrade.
ALTER TABLE hopper_job_history RENAME TO hopper_job_history_default;

CREATE TABLE hopper_job_history (LIKE hopper_job_history_default INCLUDING DEFAULTS)
    PARTITION BY RANGE (drop_after);
CREATE INDEX hopper_job_history_all_unique_key_idx ON hopper_job_history (unique_key)
    WHERE unique_key IS NOT NULL;
CREATE INDEX hopper_job_history_all_workflow_idx ON hopper_job_history ((meta ->> 'hopper.workflow'), id)
    WHERE meta ? 'hopper.workflow';
ALTER TABLE hopper_job_history ATTACH PARTITION hopper_job_history_default DEFAULT;

CREATE TABLE hopper_history_partitions (
    name     text        PRIMARY KEY,
    lower_at timestamptz NOT NULL UNIQUE,
    upper_at timestamptz NOT NULL UNIQUE,
    CHECK (lower_at < upper_at)
);

-- Whoever could use the history keeps the same grants on it, and may read
-- the list of partitions (AckBatchKeep does).
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT a.privilege_type AS privilege,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS grantee
        FROM pg_class AS c, aclexplode(c.relacl) AS a
        WHERE c.oid = 'hopper_job_history_default'::regclass AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON hopper_job_history TO %s', g.privilege, g.grantee);
        IF g.privilege = 'SELECT' THEN
            EXECUTE format('GRANT SELECT ON hopper_history_partitions TO %s', g.grantee);
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

-- hopper_history_partitions_ensure creates partitions of the given width
-- until they cover now() + ahead, at most 100 per call, and returns how
-- many it created. Partitions are contiguous: each starts where the
-- newest ends. The first starts at now() rounded down to the width; after
-- a long stop the next one stretches back to the newest's end, so that no
-- gap opens. Widths may differ between calls (workers configured
-- differently): only the ranges must not overlap, and appending makes
-- sure of it. Names are hopper_job_history_<start in UTC>.
--
-- Each new partition is attached, not created as PARTITION OF: attaching
-- locks the parent in SHARE UPDATE EXCLUSIVE mode, so reads and writes of
-- the history go on; the default partition is locked for the instant of
-- the attach. The function's lock_timeout bounds every wait; a call that
-- times out creates nothing and the next call tries again.
CREATE FUNCTION hopper_history_partitions_ensure(width interval, ahead interval) RETURNS integer
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
    -- One creator or dropper at a time; readers of the list go on.
    LOCK TABLE hopper_history_partitions IN SHARE ROW EXCLUSIVE MODE;
    SELECT max(p.upper_at) INTO newest FROM hopper_history_partitions AS p;
    WHILE (newest IS NULL OR newest < now() + ahead) AND made < 100 LOOP
        -- now() rounded down to the width, on a grid from the epoch.
        from_at := to_timestamp(floor(extract(epoch FROM now()) / width_s) * width_s);
        IF newest IS NOT NULL THEN
            to_at := greatest(newest + width, from_at + width);
            from_at := newest;
        ELSE
            to_at := from_at + width;
        END IF;
        part := 'hopper_job_history_' || to_char(from_at, 'YYYYMMDD"t"HH24MISS');
        EXECUTE format('CREATE TABLE %I (LIKE hopper_job_history INCLUDING DEFAULTS)', part);
        EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (id)', part);
        EXECUTE format('ALTER TABLE hopper_job_history ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       part, from_at, to_at);
        INSERT INTO hopper_history_partitions (name, lower_at, upper_at) VALUES (part, from_at, to_at);
        newest := to_at;
        made := made + 1;
    END LOOP;
    RETURN made;
END;
$$;

-- hopper_history_partitions_drop drops the partitions whose range has
-- passed (every row in them expired), the oldest first, and returns how
-- many. The edges of the workflow steps kept in them go first, as
-- PruneHistory deletes a step's edges with it. The parent's lock comes
-- first: an ack that is writing into the history holds it, so a row
-- cannot land in a partition between the edges' delete and the drop, and
-- nobody waits on a partition while holding the parent (no deadlock). It
-- is held for the drops' milliseconds; lock_timeout bounds the wait for
-- it, and a call that times out drops nothing.
CREATE FUNCTION hopper_history_partitions_drop() RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET lock_timeout = '2s'
AS $$
DECLARE
    part    text;
    dropped integer := 0;
BEGIN
    IF NOT EXISTS (SELECT FROM hopper_history_partitions AS p WHERE p.upper_at <= now()) THEN
        RETURN 0;
    END IF;
    LOCK TABLE hopper_history_partitions IN SHARE ROW EXCLUSIVE MODE;
    LOCK TABLE hopper_job_history IN ACCESS EXCLUSIVE MODE;
    FOR part IN SELECT p.name FROM hopper_history_partitions AS p
                WHERE p.upper_at <= now() ORDER BY p.lower_at LIMIT 100 LOOP
        EXECUTE format('DELETE FROM hopper_workflow_deps AS d WHERE d.child_id IN '
                       '(SELECT h.id FROM %I AS h WHERE h.meta ? ''hopper.workflow'')', part);
        EXECUTE format('DROP TABLE %I', part);
        DELETE FROM hopper_history_partitions AS p WHERE p.name = part;
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END;
$$;

-- A SECURITY DEFINER function must not find its names through the
-- caller's search_path: both run in this schema, whoever calls them.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %1$I.hopper_history_partitions_ensure(interval, interval) SET search_path = %1$I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION %1$I.hopper_history_partitions_drop() SET search_path = %1$I, pg_temp', current_schema());
END;
$$;
