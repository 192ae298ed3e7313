INSERT INTO bench_baseline (payload) SELECT '{}'::jsonb FROM generate_series(1, :batch);
