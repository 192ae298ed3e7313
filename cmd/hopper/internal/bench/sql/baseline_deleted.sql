-- Rows the baseline has deleted so far, as the statistics collector saw
-- them (backends report at least once a second while busy): read once per
-- window for the baseline's steady state.
SELECT coalesce(n_tup_del, 0)::bigint FROM pg_stat_user_tables WHERE relid = 'bench_baseline'::regclass;
