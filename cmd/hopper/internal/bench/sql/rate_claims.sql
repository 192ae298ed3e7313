-- The claims the rate mode logged, oldest first.
SELECT claimed_at, jobs FROM hopper_bench_rate_log ORDER BY claimed_at;
