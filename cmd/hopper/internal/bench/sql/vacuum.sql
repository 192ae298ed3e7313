VACUUM ANALYZE hopper_jobs;
