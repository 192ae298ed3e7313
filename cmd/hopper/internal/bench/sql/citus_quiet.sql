-- A sharded Hopper's shards do not NOTIFY from their enqueue trigger: a
-- NOTIFY on a node refuses the two-phase commit that Citus uses for a
-- batch enqueue through the coordinator (docs/scaling-out.md). The drain's
-- jobs are all waiting before its workers start, so nothing waits on a
-- wake-up. Run after citus_unsafe_triggers.sql in one transaction: Citus
-- passes a DDL statement's text on to the node, one statement at a time.
ALTER TABLE hopper_jobs DISABLE TRIGGER hopper_jobs_notify_enqueued;
