package silentpeer_test

import (
	"context"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/silentpeer"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// A connection configured by Apply carries the keepalive and user-timeout
// settings on its socket (read back from the kernel), still works, and
// the connect timeout is set when the string sets none.
func TestApplyTunesTheSocket(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	cfg := tcpConfig(t, d.URL)
	silentpeer.Apply(&cfg.Config)
	require.Equal(t, silentpeer.ConnectTimeout, cfg.ConnectTimeout)
	require.Equal(t, 20*time.Second, silentpeer.Bound, "the figure hopper.SilentPeerBound's documentation gives")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.Ping(ctx))

	tc, ok := conn.PgConn().Conn().(*net.TCPConn)
	require.True(t, ok, "a TCP connection, not %T", conn.PgConn().Conn())
	raw, err := tc.SyscallConn()
	require.NoError(t, err)
	got := map[string]int{}
	require.NoError(t, raw.Control(func(fd uintptr) {
		for name, opt := range map[string][2]int{
			"SO_KEEPALIVE":     {syscall.SOL_SOCKET, syscall.SO_KEEPALIVE},
			"TCP_KEEPIDLE":     {syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE},
			"TCP_KEEPINTVL":    {syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL},
			"TCP_KEEPCNT":      {syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT},
			"TCP_USER_TIMEOUT": {syscall.IPPROTO_TCP, 0x12},
		} {
			v, err := syscall.GetsockoptInt(int(fd), opt[0], opt[1])
			require.NoError(t, err, name)
			got[name] = v
		}
	}))
	require.Equal(t, map[string]int{
		"SO_KEEPALIVE":     1,
		"TCP_KEEPIDLE":     int(silentpeer.KeepAliveIdle.Seconds()),
		"TCP_KEEPINTVL":    int(silentpeer.KeepAliveInterval.Seconds()),
		"TCP_KEEPCNT":      silentpeer.KeepAliveCount,
		"TCP_USER_TIMEOUT": int(silentpeer.UserTimeout.Milliseconds()),
	}, got)
}

// A connect_timeout in the string wins, and a custom dialer is wrapped,
// not replaced.
func TestApplyKeepsWhatTheConfigSays(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	cfg := tcpConfig(t, d.URL)
	cfg.ConnectTimeout = 3 * time.Second // as connect_timeout=3 sets it
	dialed := 0
	inner := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed++
		return inner(ctx, network, addr)
	}
	silentpeer.Apply(&cfg.Config)
	require.Equal(t, 3*time.Second, cfg.ConnectTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.Equal(t, 1, dialed)
}

// tcpConfig is dsn's config over TCP: the test server may be reached by a
// Unix socket, whose peer cannot go silent.
func tcpConfig(t *testing.T, dsn string) *pgx.ConnConfig {
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	if strings.HasPrefix(cfg.Host, "/") {
		cfg.Host = "127.0.0.1"
	}
	cfg.Fallbacks = nil
	return cfg
}
