ALTER TABLE hopper_dead_jobs DROP CONSTRAINT hopper_dead_jobs_partition_at_check;
ALTER TABLE hopper_dead_jobs DROP COLUMN partition_at;
