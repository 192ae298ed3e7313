ANALYZE hopper_jobs;
