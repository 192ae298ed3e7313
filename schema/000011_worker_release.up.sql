-- When a live worker last handed back the jobs of this worker because it
-- was gone (no beat within stale_after_ms). A gone worker is released once:
-- the sweep skips it while released_at is at or past its last beat, and a
-- worker that beats again after a stall (its jobs already given away)
-- learns so from its next beat.
ALTER TABLE hopper_workers ADD COLUMN released_at timestamptz;
