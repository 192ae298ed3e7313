-- Retention by partitions, step 2 of 3: migration 19's check, validated.
--
-- VALIDATE reads the whole table but holds only a SHARE UPDATE EXCLUSIVE
-- lock: inserts, deletes and reads go on meanwhile (about 85 ms per
-- million rows here). It is a migration of its own because the lock
-- migration 19 took to add the check would otherwise be held through
-- the scan.
--
-- Guarded by: schema/TestHistoryPartitionsMigration.
ALTER TABLE hopper_job_history VALIDATE CONSTRAINT hopper_job_history_drop_after_check;
