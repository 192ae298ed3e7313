// Package silentpeer makes a PostgreSQL connection notice a peer that
// stopped answering without closing the socket: a primary whose machine
// died or was cut off by the network, the old primary after a failover
// that never closed its clients' connections. Without it a connection
// waits on the kernel: Go's default keepalives take 15 s + 9 × 15 s on an
// idle socket, and unacknowledged writes are retransmitted for about 15
// minutes (tcp_retries2) before the read fails.
//
// Apply wraps a connection config's dialer so that every TCP connection
// it makes probes an idle peer after KeepAliveIdle, every
// KeepAliveInterval, and gives up after KeepAliveCount unanswered probes;
// and aborts when data it sent stays unacknowledged for UserTimeout
// (TCP_USER_TIMEOUT, Linux). Either way a dead peer is noticed within
// Bound. A peer whose kernel still answers (a frozen server process, a
// proxy that stopped forwarding) is not dead to TCP: only a deadline on
// the statement or a ping notices it, which is why Hopper's statements
// carry deadlines and its LISTEN session pings.
package silentpeer

import (
	"context"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	KeepAliveIdle     = 5 * time.Second
	KeepAliveInterval = 5 * time.Second
	KeepAliveCount    = 3
	UserTimeout       = 20 * time.Second
	// ConnectTimeout bounds each host's connection attempt when the
	// connection string sets no connect_timeout: with several hosts
	// (target_session_attrs), a silent one must not hold up the rest.
	ConnectTimeout = 10 * time.Second
	// Bound is how long a dead peer goes unnoticed at most.
	Bound = KeepAliveIdle + KeepAliveCount*KeepAliveInterval
)

// Apply sets cfg's dialer to tune every TCP connection as the package
// says, wrapping the dialer cfg has (a custom one, or pgconn's), and sets
// ConnectTimeout if cfg has none. A Unix socket is left alone: its peer is
// on this machine.
func Apply(cfg *pgconn.Config) {
	dial := cfg.DialFunc
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			if err := tune(tc); err != nil {
				c.Close()
				return nil, err
			}
		}
		return c, nil
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = ConnectTimeout
	}
}

func tune(c *net.TCPConn) error {
	if err := c.SetKeepAliveConfig(net.KeepAliveConfig{
		Enable: true, Idle: KeepAliveIdle, Interval: KeepAliveInterval, Count: KeepAliveCount,
	}); err != nil {
		return err
	}
	return setUserTimeout(c, UserTimeout)
}
