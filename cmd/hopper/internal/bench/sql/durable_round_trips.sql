-- The statements the durable mode's calls send, in pg_stat_statements
-- (when it is loaded): BEGIN and COMMIT (counted while
-- pg_stat_statements.track_utility is on, as by default), the call's write,
-- and a durable job's records (RecordStep, and ListSteps at the first call
-- of a run). The worker's claims and acknowledgements are left out, so the
-- delta between two readings, over the calls made, is the round trips a
-- call costs. The reading itself names pg_stat_statements, and is left
-- out too.
SELECT coalesce(sum(s.calls), 0)::bigint
FROM public.pg_stat_statements AS s
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND (lower(btrim(s.query)) IN ('begin', 'commit')
       OR s.query LIKE '-- name: RecordStep %'
       OR s.query LIKE '-- name: ListSteps %'
       OR s.query LIKE '%INSERT INTO hopper_bench_durable_rows%')
  AND s.query NOT LIKE '%pg_stat_statements%';
