package registry

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var errInUse = errors.New("in use")

func config(b *passbed.Bed, id string) Config {
	return Config{Queries: b.Q, Log: b.Log, ID: id, Schema: b.DB.Schema, Queues: []string{"default"},
		BeatInterval: time.Second, LeaseDuration: 30 * time.Second, MigrateUp: "migrate", IDInUse: errInUse,
		Identity: func() (string, int) { return "h", 7 }}
}

// A registry writes its row at start, as Identity says, refreshes it on a
// beat, writes it again when it is gone, and deletes it at the stop; a
// second registry of the same ID in the process is refused at once.
func TestRegistryRow(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	r, err := New(config(b, "w1"))
	require.NoError(t, err)
	require.NoError(t, r.ClaimID())
	other, err := New(config(b, "w1"))
	require.NoError(t, err)
	require.ErrorIs(t, other.ClaimID(), errInUse)
	r.FreeID()
	require.NoError(t, other.ClaimID(), "freed: the ID may be taken again")
	other.FreeID()

	require.True(t, r.Started().IsZero())
	tookOver, err := r.Register(b.Ctx)
	require.NoError(t, err)
	require.False(t, tookOver)
	require.False(t, r.Started().IsZero())
	rows, err := b.Q.ListWorkers(b.Ctx, nil)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "h", rows[0].Host)
	require.Equal(t, int32(7), rows[0].Pid)
	require.Equal(t, []string{"default"}, rows[0].Queues)

	res := r.Beat(b.Ctx, b.Q)
	require.NoError(t, res.Err)
	require.False(t, res.Released)

	_, err = b.DB.Pool.Exec(b.Ctx, "DELETE FROM hopper_workers")
	require.NoError(t, err)
	require.NoError(t, r.Beat(b.Ctx, b.Q).Err)
	rows, err = b.Q.ListWorkers(b.Ctx, nil)
	require.NoError(t, err)
	require.Len(t, rows, 1, "a beat writes a lost row again")

	r.Remove(b.Ctx)
	rows, err = b.Q.ListWorkers(b.Ctx, nil)
	require.NoError(t, err)
	require.Empty(t, rows)
}

// A Config missing what the registry works with is refused at New.
func TestRegistryConfig(t *testing.T) {
	t.Parallel()
	whole := Config{Queries: db.New(nil), Log: slog.Default(), ID: "w", Schema: "s", BeatInterval: time.Second,
		LeaseDuration: time.Second, IDInUse: errInUse}
	_, err := New(whole)
	require.NoError(t, err)
	for name, edit := range map[string]func(*Config){
		"no queries": func(c *Config) { c.Queries = nil }, "no log": func(c *Config) { c.Log = nil },
		"no sentinel": func(c *Config) { c.IDInUse = nil }, "no id": func(c *Config) { c.ID = "" },
		"no schema": func(c *Config) { c.Schema = "" }, "no beat": func(c *Config) { c.BeatInterval = 0 },
		"no lease": func(c *Config) { c.LeaseDuration = 0 },
	} {
		cfg := whole
		edit(&cfg)
		_, err := New(cfg)
		require.Error(t, err, name)
	}
}
