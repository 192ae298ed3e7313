-- Room in a job's metadata for the keys Hopper adds after the enqueue.
--
-- A job's metadata is at most 8,192 bytes as stored (jobs.MaxMetaBytes;
-- the enqueue paths, Go's and hopper_enqueue's, check that). Hopper then
-- adds keys of its own while the job lives: 'hopper.durable' at a durable
-- handler's first record or progress, 'hopper.awaited' when a WaitJob
-- waits for it, 'hopper.uncharged' when a claim is given back. With the
-- table's check at the same 8,192 bytes, a job enqueued near the limit
-- could never record a step (every record failed the check, and the step
-- ran again on each attempt), and WaitJob skipped its mark. The table now
-- allows 512 bytes more than any enqueue may write, which Hopper's own
-- keys, together, never use up.
--
-- Dropping and adding the check takes the table's ACCESS EXCLUSIVE lock
-- for an instant; the new check is added NOT VALID (no scan under that
-- lock) and validated by migration 29 under a lock that lets writes go
-- on. Every row satisfies it already: it is looser than the check it
-- replaces.
--
-- Guarded by: schema/TestMetaRoomMigration, worker/TestDurableAtTheMetaLimit.
ALTER TABLE hopper_jobs
    DROP CONSTRAINT hopper_jobs_meta_check,
    ADD CONSTRAINT hopper_jobs_meta_check
        CHECK (meta IS NULL OR (jsonb_typeof(meta) = 'object' AND octet_length(meta::text) <= 8704)) NOT VALID;
