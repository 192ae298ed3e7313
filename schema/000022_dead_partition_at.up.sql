-- Dead jobs by partitions, step 1 of 3: the dead jobs' partition key.
--
-- From migration 24 on, hopper_dead_jobs is partitioned by partition_at:
-- the time a job died, when a time partition covered that time, and NULL
-- otherwise. Rows of today's table, and rows that died while no partition
-- covered their time, stay in the default partition and are deleted by
-- the pruner as before; the others go, a partition at a time, by a DROP.
-- Unlike the history's drop_after (migration 19), which is a row's own
-- expiry, partition_at is a time of death: how long dead jobs are kept is
-- a worker's setting (DeadRetention), not a row's, and the drop is given
-- it.
--
-- The check proves, for every partition attached later, that the default
-- partition holds none of its rows (see migration 19); adding it NOT
-- VALID takes the table's lock for an instant, and migration 23
-- validates it under a lock that lets writes go on.
--
-- Guarded by: schema/TestDeadPartitionsMigration.
ALTER TABLE hopper_dead_jobs ADD COLUMN partition_at timestamptz;
ALTER TABLE hopper_dead_jobs
    ADD CONSTRAINT hopper_dead_jobs_partition_at_check CHECK (partition_at IS NULL) NOT VALID;
