-- Who may run the partition functions: the roles that may delete what
-- they drop, and no longer PUBLIC (issue 61).
--
-- hopper_history_partitions_ensure and hopper_history_partitions_drop
-- (migration 21), hopper_dead_partitions_ensure and
-- hopper_dead_partitions_drop (migration 24) are SECURITY DEFINER: they
-- create, attach and drop partitions, which takes the owner's rights, for
-- workers that have none. PostgreSQL grants EXECUTE on a new function to
-- PUBLIC, and docs/sql-api.md told a role that only enqueues to take
-- EXECUTE ON ALL FUNCTIONS IN SCHEMA: any role that could reach the
-- schema, a producer with the documented grants among them, could run
-- them as the owner. A producer dropped a dead jobs' partition with a
-- retention of a minute (the purge triggers then deleted its durable
-- records and cancelled the workflow steps it held) and created 100
-- partitions in one call.
--
-- Each function's EXECUTE now goes with DELETE on the table whose
-- partitions it manages (hopper_job_history, hopper_dead_jobs): the
-- roles that may already delete those rows one by one, as a worker's
-- pruner does (PruneHistory, PruneDead) under the least-privilege grants
-- of docs/operating.md, and no other. So, on each function:
--
--   - PUBLIC's EXECUTE is revoked;
--   - a role granted EXECUTE by name but without DELETE on the table
--     (has_table_privilege: its own grant, a group's or PUBLIC's) loses
--     it: such a grant came from GRANT EXECUTE ON ALL FUNCTIONS, which the
--     SQL API's guide gave producers;
--   - every role granted DELETE on the table (PUBLIC included, where it
--     is) is granted EXECUTE, so that a worker that ran with PUBLIC's
--     EXECUTE keeps its pruner without a new grant. A member of a group
--     granted DELETE inherits the group's EXECUTE.
--
-- Bounds were considered and left as they are: width between a minute
-- and 31 days, ahead at most 400 days, at most 100 partitions per call,
-- and no drop for a retention under a minute. A worker may set
-- DeadRetention to a minute, and a role that may call the functions may
-- delete every dead job and every completed one anyway: a tighter bound
-- would refuse workers and protect nothing from such a role.
--
-- hopper_dead_partition_at (migration 24) stays SECURITY DEFINER and
-- executable by PUBLIC: it is the default of hopper_dead_jobs.partition_at,
-- evaluated for whoever inserts a dead job, and only reads which
-- partition covers a time from a list the readers of the dead jobs may
-- read (SELECT on hopper_dead_partitions). Every other function is
-- SECURITY INVOKER and keeps PUBLIC's EXECUTE.
--
-- Locks: none on a table (GRANT and REVOKE on functions, the catalog
-- read).
--
-- Guarded by: schema/TestDefinerGrants, schema/TestDefinerGrantsMigration,
-- schema/TestPrivilegeProducer, schema/TestPrivilegeWorker,
-- schema/TestPrivilegeReader, schema/TestPrivilegeOwner,
-- tests/TestLeastPrivilege, tests/TestSQLAPILeastPrivilege.
DO $$
DECLARE
    f record;
    g record;
BEGIN
    FOR f IN
        SELECT v.sig::regprocedure AS fn, v.tbl::regclass AS tbl
        FROM (VALUES ('hopper_history_partitions_ensure(interval, interval)', 'hopper_job_history'),
                     ('hopper_history_partitions_drop()', 'hopper_job_history'),
                     ('hopper_dead_partitions_ensure(interval, interval)', 'hopper_dead_jobs'),
                     ('hopper_dead_partitions_drop(interval)', 'hopper_dead_jobs')) AS v(sig, tbl)
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f.fn);
        FOR g IN
            SELECT a.grantee
            FROM pg_proc AS p, aclexplode(p.proacl) AS a
            WHERE p.oid = f.fn AND a.privilege_type = 'EXECUTE'
              AND a.grantee <> 0 AND a.grantee <> p.proowner
              AND NOT has_table_privilege(a.grantee, f.tbl, 'DELETE')
        LOOP
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM %I', f.fn, pg_get_userbyid(g.grantee));
        END LOOP;
        FOR g IN
            SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS grantee
            FROM pg_class AS c, aclexplode(c.relacl) AS a
            WHERE c.oid = f.tbl AND a.privilege_type = 'DELETE' AND a.grantee <> c.relowner
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', f.fn, g.grantee);
        END LOOP;
    END LOOP;
END;
$$;
