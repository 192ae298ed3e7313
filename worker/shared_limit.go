package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
)

// SharedLimit lets at most max jobs of every kind given the same name
// run at once, in any queue, across all workers: "smtp" for every kind
// that sends mail through one relay. Each worker records, as it starts,
// the limit of each kind it runs (in hopper_shared_limits), so a claim
// counts the running jobs of the limit's kinds that other workers run as
// well. Every kind of a name must be given the same max. A worker with a
// kind under a shared limit claims all its queues under flow control.
func SharedLimit(name string, max int) HandleOption {
	return func(o *handleOptions) { o.shared = sharedLimit{name: name, max: max} }
}

// recordShared records the shared limit of each kind this worker runs
// under one, so that every worker's claims count that kind's running
// jobs against it, and removes the record of the worker's other kinds (a
// kind taken out of a limit). It runs once, at start.
func (r *run) recordShared(ctx context.Context) error {
	t := r.w.handlers
	if !t.anyShared() {
		return nil
	}
	err := r.w.q.RecordSharedLimits(ctx, db.RecordSharedLimitsParams{Kinds: t.kinds, Names: t.sharedNames, MaxRunning: t.sharedMax})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable { // undefined_table
		return migrated.Errorf(r.w.migrateUp(), "schema %s lacks hopper_shared_limits, which migration %s adds", r.schema, migrated.Migration(31))
	}
	if err != nil {
		return fmt.Errorf("worker: start: record shared limits: %w", err)
	}
	return nil
}

// anyShared reports whether some kind runs under a shared limit.
func (t *handlerTable) anyShared() bool {
	for _, n := range t.sharedNames {
		if n != "" {
			return true
		}
	}
	return false
}

// sharedOf reports whether kind runs under a shared limit: its end may
// let a job held back by the limit run, so the claim loop looks again.
func (t *handlerTable) sharedOf(kind string) bool {
	h := t.of(kind)
	return h != nil && h.shared.name != ""
}
