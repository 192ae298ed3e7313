package migrated

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schemascope"
)

// current remembers the handles whose schema was found at Latest or
// newer, so that Ensure reads the version once per pool (or per
// connection, for a caller's transaction), not once per call. Its keys
// hold the handles weakly, and a handle's entry goes when the handle is
// collected: a process whose pool replaces its connections does not grow
// the map.
var current sync.Map // gateKey -> struct{}

type gateKey struct {
	pool   weak.Pointer[pgxpool.Pool]
	conn   weak.Pointer[pgx.Conn]
	schema string // jobs.InSchema's schema, "" for the search_path
}

// Ensure returns ErrNotMigrated, naming the migrations missing and what
// to run, when the schema that q's statements reach records a version
// older than Latest: a build must not write rows an older schema's
// triggers and checks would treat as that schema's own (operating.md's
// promise that a kind's Enqueue and the Client refuse an older schema).
//
// It reads the version once per pool, or per connection for a
// transaction or a connection, and remembers only a schema found
// current, so that migrating while the program runs lifts the refusal at
// the next call. Handles of other types, a schema without hopper_jobs,
// and a version the role may not read are let through: then the
// statements' own errors say what is missing (Explain).
func Ensure(ctx context.Context, q db.DBTX) error {
	key, ok := keyOf(q)
	if !ok {
		return nil
	}
	if _, ok := current.Load(key); ok {
		return nil
	}
	schemaName, err := db.New(q).HopperSchema(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if err := Check(ctx, q, schemaName, Run(SchemaOf(q))); err != nil {
		return err
	}
	if _, loaded := current.LoadOrStore(key, struct{}{}); !loaded {
		forgetWhenCollected(q, key)
	}
	return nil
}

// keyOf names the handle a version read holds for: the pool, or the
// connection under a transaction or a pooled connection.
func keyOf(q db.DBTX) (gateKey, bool) {
	key := gateKey{}
	if s, ok := q.(*schemascope.DB); ok {
		key.schema = s.Schema()
		q = s.Inner()
	}
	switch h := q.(type) {
	case *pgxpool.Pool:
		key.pool = weak.Make(h)
	case *pgxpool.Conn:
		key.conn = weak.Make(h.Conn())
	case *pgx.Conn:
		key.conn = weak.Make(h)
	case pgx.Tx:
		c := h.Conn()
		if c == nil {
			return gateKey{}, false
		}
		key.conn = weak.Make(c)
	default:
		return gateKey{}, false
	}
	return key, true
}

func forgetWhenCollected(q db.DBTX, key gateKey) {
	if s, ok := q.(*schemascope.DB); ok {
		q = s.Inner()
	}
	forget := func(k gateKey) { current.Delete(k) }
	switch h := q.(type) {
	case *pgxpool.Pool:
		runtime.AddCleanup(h, forget, key)
	case *pgxpool.Conn:
		runtime.AddCleanup(h.Conn(), forget, key)
	case *pgx.Conn:
		runtime.AddCleanup(h, forget, key)
	case pgx.Tx:
		runtime.AddCleanup(h.Conn(), forget, key)
	}
}
