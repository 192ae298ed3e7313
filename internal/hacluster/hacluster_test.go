package hacluster_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/hacluster"
)

// The formation's own life: up with node1 primary, a switchover makes
// node2 primary, node2 killed makes node1 writable again, node2 restarted
// rejoins as its standby, and the multi-host URL always reaches the
// writable node.
func TestFormationFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a pg_auto_failover formation")
	}
	if err := hacluster.Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f, err := hacluster.Start(ctx, hacluster.Options{FastDetection: true, Log: testWriter{t}})
	require.NoError(t, err)
	defer f.Stop()

	primary, err := f.Stable(ctx)
	require.NoError(t, err)
	require.Equal(t, "node1", primary.Name)
	requireWritable(ctx, t, f.URL(), primary)

	require.NoError(t, f.Switchover(ctx))
	primary, err = f.Stable(ctx)
	require.NoError(t, err)
	require.Equal(t, "node2", primary.Name)
	requireWritable(ctx, t, f.URL(), primary)

	require.NoError(t, f.Kill(primary))
	promoted, err := f.Writable(ctx, primary)
	require.NoError(t, err)
	require.Equal(t, "node1", promoted.Name)
	requireWritable(ctx, t, f.URL(), promoted)

	require.NoError(t, f.Restart(primary))
	again, err := f.Stable(ctx)
	require.NoError(t, err)
	require.Equal(t, "node1", again.Name)
}

// requireWritable: a read-write session through url lands on want.
func requireWritable(ctx context.Context, t *testing.T, url string, want *hacluster.Node) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.Equal(t, uint16(want.Port), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).AddrPort().Port())
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
