package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SeedMillion writes a million jobs into the schema of pool, for tests of
// how listing scales: 900,000 live ones (ids 11 to 900,010; every tenth
// scheduled, every thousandth with a unique key "key-<n>", queues q0–q2,
// kinds k0–k6), 50,000 dead or cancelled ones (ids 2,000,001–2,050,000),
// 50,000 completed ones (ids 3,000,001–3,050,000), and first, the oldest,
// ten of kind "rare" (ids 1–10): the worst case of a filter. Then ANALYZE.
func SeedMillion(t testing.TB, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	for _, stmt := range []string{
		`INSERT INTO hopper_jobs (queue, kind, payload) SELECT 'q0', 'rare', '{}' FROM generate_series(1, 10)`,
		`INSERT INTO hopper_jobs (queue, kind, payload, state, run_at, unique_key)
		 SELECT 'q' || (g % 3), 'k' || (g % 7), '{"n":1}',
		        CASE WHEN g % 10 = 0 THEN 'scheduled' ELSE 'pending' END,
		        CASE WHEN g % 10 = 0 THEN now() + interval '1 day' ELSE now() END,
		        CASE WHEN g % 1000 = 0 THEN 'key-' || g END
		 FROM generate_series(1, 900000) AS g`,
		`INSERT INTO hopper_dead_jobs (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, reason, created_at, state)
		 SELECT 2000000 + g, 'q' || (g % 3), 'k' || (g % 7), 1, '{}', 0, 1, 1, '[]', 'x', now(),
		        CASE WHEN g % 2 = 0 THEN 'dead' ELSE 'cancelled' END
		 FROM generate_series(1, 50000) AS g`,
		`INSERT INTO hopper_job_history (id, queue, kind, version, payload, priority, attempt, max_attempts, errors, created_at, run_at, keep_until)
		 SELECT 3000000 + g, 'q' || (g % 3), 'k' || (g % 7), 1, '{}', 0, 1, 1, '[]', now(), now(), now() + interval '1 day'
		 FROM generate_series(1, 50000) AS g`,
		"ANALYZE hopper_jobs, hopper_dead_jobs, hopper_job_history",
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("testdb: seed a million jobs: %v", err)
		}
	}
}
