-- Retention by partitions, step 1 of 3: the history's partition key.
--
-- From migration 21 on, hopper_job_history is partitioned by drop_after,
-- the time after which a row may go (its keep_until, when a partition
-- covers it), and a partition whose range has passed is dropped whole
-- instead of deleted row by row. The rows of today's table, and every
-- row written by a build that does not know drop_after, have it NULL;
-- migration 21 keeps them in the default partition, which is pruned by
-- DELETE as before.
--
-- The check says so, and it is what lets migration 21 attach partitions
-- beside that default partition without scanning it: PostgreSQL must
-- prove that the default holds no row of a new partition's range, and a
-- validated check proves it. Adding it NOT VALID takes the table's lock
-- for an instant; migration 20 validates it under a lock that lets
-- writes go on. Adding a column without a default rewrites nothing.
--
-- Guarded by: schema/TestHistoryPartitionsMigration.
ALTER TABLE hopper_job_history ADD COLUMN drop_after timestamptz;
ALTER TABLE hopper_job_history
    ADD CONSTRAINT hopper_job_history_drop_after_check CHECK (drop_after IS NULL) NOT VALID;
