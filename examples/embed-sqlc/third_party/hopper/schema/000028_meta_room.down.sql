-- The check back at 8,192 bytes, NOT VALID: a job Hopper marked beyond
-- that while at version 28 would fail a validation, and keeps its
-- metadata; new writes are checked at the old limit again.
ALTER TABLE hopper_jobs
    DROP CONSTRAINT hopper_jobs_meta_check,
    ADD CONSTRAINT hopper_jobs_meta_check
        CHECK (meta IS NULL OR (jsonb_typeof(meta) = 'object' AND octet_length(meta::text) <= 8192)) NOT VALID;
