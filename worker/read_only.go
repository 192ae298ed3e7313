package worker

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// readOnlyError reports whether err is a server refusing to write because
// it is read-only (read_only_sql_transaction): a fault of the session's
// server, never of the statement. A standby answers every write, and
// LISTEN, with it; so does a primary demoted by a failover, to the
// sessions still open on it.
func readOnlyError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ReadOnlySQLTransaction
}

// readOnlyGuard replaces the pool's sessions when a statement meets a
// read-only server. After a failover every open session of the pool may
// still reach the old primary, now a standby: retried there, a claim or an
// ack would be refused forever. Reset closes them (those in use once
// released), so the next statements dial again, and a multi-host URL with
// target_session_attrs=read-write finds the new primary.
//
// Invariant: the pool is reset at most once per every, so a burst of
// refusals from every component costs one reset.
type readOnlyGuard struct {
	pool  *pgxpool.Pool
	log   *slog.Logger
	every time.Duration // readOnlyResetEvery, but in tests
	// refusals counts every refusal (hopper_read_only_refusals_total);
	// nil in tests.
	refusals prometheus.Counter

	mu        sync.Mutex
	lastReset time.Time
}

// readOnlyResetEvery spaces the resets of one worker's pool.
const readOnlyResetEvery = time.Second

// newReadOnlyGuard resets pool at most once per every, counting each
// refusal on refusals (nil: not counted, in tests).
func newReadOnlyGuard(pool *pgxpool.Pool, log *slog.Logger, every time.Duration, refusals prometheus.Counter) *readOnlyGuard {
	return &readOnlyGuard{pool: pool, log: log, every: every, refusals: refusals}
}

// check reports whether err is a read-only server's refusal, and then
// resets the pool (at most once per g.every). The caller
// retries after its usual pause, on a new session.
func (g *readOnlyGuard) check(err error) bool {
	if !readOnlyError(err) {
		return false
	}
	if g.refusals != nil {
		g.refusals.Inc()
	}
	g.mu.Lock()
	due := time.Since(g.lastReset) >= g.every
	if due {
		g.lastReset = time.Now()
	}
	g.mu.Unlock()
	if due {
		g.log.Warn("the database refused a write as read-only (a standby, or a primary demoted by a failover): replacing the pool's sessions",
			"error", err)
		g.pool.Reset()
	}
	return true
}
