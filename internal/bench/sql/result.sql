-- Rows inserted (the identity's last value) and rows still in the table.
SELECT coalesce(max(id), 0) AS inserted, count(*) AS remaining FROM bench_baseline;
