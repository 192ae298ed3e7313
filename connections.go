package hopper

import (
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/internal/silentpeer"
)

// SilentPeerBound is how long a connection configured by DetectSilentPeers
// goes on waiting on a peer that died or was cut off without closing the
// socket, at most: keepalive probes after 5 s idle, every 5 s, three
// unanswered; and 20 s (TCP_USER_TIMEOUT) for data sent and never
// acknowledged.
const SilentPeerBound = silentpeer.Bound

// DetectSilentPeers makes every TCP connection cfg opens notice a server
// that stopped answering without closing the socket — a primary whose
// machine died, one cut off by the network, the old primary after a
// failover — within SilentPeerBound, instead of the kernel's defaults
// (minutes on an idle socket, about 15 minutes with data unacknowledged).
// It wraps cfg's dialer (a custom one is kept) and sets a 10 s connect
// timeout per host when the connection string sets no connect_timeout,
// so that with several hosts a silent one does not hold up the others.
//
// Call it on the pool config you give the worker (the worker already does
// it for its own LISTEN session, and the hopper command for its
// connections):
//
//	cfg, err := pgxpool.ParseConfig(url)
//	hopper.DetectSilentPeers(&cfg.ConnConfig.Config)
//	pool, err := pgxpool.NewWithConfig(ctx, cfg)
//
// A server whose kernel still answers while the server does not (a frozen
// process, a proxy that stopped forwarding) is alive to TCP: deadlines on
// statements notice it, and the worker's statements carry them.
// docs/high-availability.md has the whole picture.
func DetectSilentPeers(cfg *pgconn.Config) { silentpeer.Apply(cfg) }
