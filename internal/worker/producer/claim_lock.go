package producer

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/sqlbatch"
)

// underClaimLock runs claim with queries whose every statement runs after
// the queue's LockClaims, in the same transaction: each statement then
// sees every limited claim of the queue that committed before it.
//
// On the worker's own pool, each statement goes in one batch with the lock
// (lockedBatch): one round trip, one implicit transaction that the server
// commits as soon as the statement ends. The lock is then held for the
// statement and its commit only, never while this process reads results
// and answers: on a loaded machine a worker waiting for a core would keep
// every other claim of the queue waiting with it. A worker scoped to a
// schema runs claim in a transaction begun on the scope, the lock first.
//
// The lock covers the shared limits of the worker's kinds too (shared:
// parallel to its kinds, ” none), so that claims of different queues
// under one shared limit take turns.
func (p *Producer) underClaimLock(ctx context.Context, queue string, claim func(q *db.Queries) error) error {
	lock := db.LockClaimsParams{Queue: queue, SharedNames: p.cfg.Kinds.SharedNames}
	if p.cfg.Scope == nil {
		return claim(db.New(&lockedBatch{sender: p.cfg.Pool, lock: sqlbatch.Record(func(q *db.Queries) error {
			return q.LockClaims(ctx, lock)
		})}))
	}
	return pgx.BeginFunc(ctx, p.cfg.Scope, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.LockClaims(ctx, lock); err != nil {
			return err
		}
		return claim(q)
	})
}

// lockedBatch is a db.DBTX that sends each statement in a batch after the
// lock statement (sqlbatch.Around): the two run in one implicit
// transaction, the statement's snapshot taken after the lock is granted,
// and the statement's rows end with the transaction's outcome, so a failed
// commit is their error.
type lockedBatch struct {
	sender sqlbatch.Sender
	lock   sqlbatch.Statement
}

// Exec, QueryRow and CopyFrom are not for claims: the claim statements
// return rows.
func (l *lockedBatch) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNotAClaim
}

func (l *lockedBatch) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{} }

func (l *lockedBatch) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errNotAClaim
}

func (l *lockedBatch) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return sqlbatch.Around(ctx, l.sender, l.lock, sql, args)
}

// errNotAClaim: lockedBatch runs statements that return rows.
var errNotAClaim = errors.New("hopper: only a claim's rows run after the claim lock")

type errRow struct{}

func (errRow) Scan(...any) error { return errNotAClaim }
