package cli

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// withSetting adds key=value to a connection string of either form.
func withSetting(dsn, key, value string) string {
	switch {
	case strings.Contains(dsn, "://") && strings.Contains(dsn, "?"):
		return dsn + "&" + key + "=" + value
	case strings.Contains(dsn, "://"):
		return dsn + "?" + key + "=" + value
	}
	return dsn + " " + key + "=" + value
}

// TestCommandPoolsAreSmall: a command's pool holds at most
// commandMaxConns connections, the dashboard's dashboardMaxConns, and a
// connection string's own pool_max_conns wins over both.
func TestCommandPoolsAreSmall(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	size := func(dsn string, open func(*env) (*pgxpool.Pool, error)) int32 {
		t.Helper()
		e := &env{ctx: context.Background(), stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, dbURL: dsn}
		pool, err := open(e)
		require.NoError(t, err)
		defer pool.Close()
		return pool.Config().MaxConns
	}
	command := (*env).connectHopper
	dashboard := func(e *env) (*pgxpool.Pool, error) { return e.connectHopperSized(dashboardMaxConns) }

	require.EqualValues(t, commandMaxConns, size(d.URL, command))
	require.EqualValues(t, commandMaxConns, size(d.URL, (*env).connect))
	require.EqualValues(t, dashboardMaxConns, size(d.URL, dashboard))

	own := withSetting(d.URL, "pool_max_conns", "7")
	require.EqualValues(t, 7, size(own, command), "the connection string's pool_max_conns wins")
	require.EqualValues(t, 7, size(own, dashboard), "the connection string's pool_max_conns wins")
	one := withSetting(d.URL, "pool_max_conns", "1")
	require.EqualValues(t, 1, size(one, dashboard), "even when smaller")

	floor := withSetting(d.URL, "pool_min_conns", "3")
	require.EqualValues(t, 3, size(floor, command), "pool_min_conns alone raises the cap to itself")
}

// TestSizePoolReadsEitherForm: pool_max_conns is found in a URL and in a
// keyword/value string, and a search_path or an application_name is not
// taken for it.
func TestSizePoolReadsEitherForm(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]int32{
		"postgres://u@h/db?pool_max_conns=9":                     9,
		"postgres://u@h/db?search_path=s&pool_max_conns=9":       9,
		"host=h user=u dbname=db pool_max_conns=9":               9,
		"host=h user=u dbname=db pool_max_conns = '9'":           9,
		"postgres://u@h/db?search_path=s":                        commandMaxConns,
		"host=h user=u application_name=pool_max_conns":          commandMaxConns,
		"postgres://u@h/db?application_name=pool_max_conns%3D50": commandMaxConns,
		"": commandMaxConns,
	} {
		cfg, err := pgxpool.ParseConfig(dsn)
		require.NoError(t, err, dsn)
		sizePool(cfg, commandMaxConns)
		require.Equal(t, want, cfg.MaxConns, dsn)
	}
}
