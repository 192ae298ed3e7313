package schema_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/schema"
)

// TestMetaRoomMigration: migration 28 lets hopper_jobs hold 512 bytes of
// metadata more than an enqueue writes (room for Hopper's own keys), its
// check added NOT VALID; 29 validates it. Down, the check is back at
// 8,192 bytes, NOT VALID (a row Hopper marked past that keeps its
// metadata).
func TestMetaRoomMigration(t *testing.T) {
	ctx, _ := setup(t)
	d := testdb.NewAtVersion(t, 27)
	insert := func(n int) error {
		_, err := d.Pool.Exec(ctx, `INSERT INTO hopper_jobs (queue, kind, payload, meta) VALUES ('default', 'k', '{}', $1::jsonb)`,
			`{"k": "`+strings.Repeat("x", n-len(`{"k": ""}`))+`"}`)
		return err
	}
	require.NoError(t, insert(8192))
	require.ErrorContains(t, insert(8193), "hopper_jobs_meta_check", "version 27: the enqueue limit")

	mg, err := schema.NewMigrator(ctx, d.Pool)
	require.NoError(t, err)
	defer mg.Close()
	valid := func() bool {
		var v bool
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT convalidated FROM pg_constraint WHERE conname = 'hopper_jobs_meta_check' AND conrelid = 'hopper_jobs'::regclass`).Scan(&v))
		return v
	}
	require.NoError(t, mg.Up(ctx))
	require.True(t, valid(), "validated by migration 29")
	require.NoError(t, insert(8704))
	require.ErrorContains(t, insert(8705), "hopper_jobs_meta_check")

	downTo(ctx, t, mg, 27)
	require.False(t, valid(), "back at 8,192 bytes, not validated: rows past it stay")
	require.ErrorContains(t, insert(8193), "hopper_jobs_meta_check")
	require.NoError(t, mg.Up(ctx))
}
