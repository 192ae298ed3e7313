-- Migration 28's check, validated.
--
-- VALIDATE reads the whole table but holds only a SHARE UPDATE EXCLUSIVE
-- lock: claims, acknowledgements and enqueues go on meanwhile. It is a
-- migration of its own because the lock migration 28 took to replace the
-- check would otherwise be held through the scan.
--
-- Guarded by: schema/TestMetaRoomMigration.
ALTER TABLE hopper_jobs VALIDATE CONSTRAINT hopper_jobs_meta_check;
