-- Dead jobs by partitions, step 2 of 3: migration 22's check, validated.
--
-- VALIDATE reads the whole table under a SHARE UPDATE EXCLUSIVE lock:
-- inserts, deletes and reads go on meanwhile. A migration of its own so
-- that migration 22's brief lock is not held through the scan.
--
-- Guarded by: schema/TestDeadPartitionsMigration.
ALTER TABLE hopper_dead_jobs VALIDATE CONSTRAINT hopper_dead_jobs_partition_at_check;
