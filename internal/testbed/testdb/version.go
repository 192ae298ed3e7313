package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/hopperq/hopper/schema"
)

// NewAtVersion gives the test a fresh schema migrated only up to version
// (0: an empty schema), as an upgrade without `hopper migrate up` leaves
// it: what a build that needs a newer schema meets.
func NewAtVersion(t testing.TB, version uint) *DB {
	t.Helper()
	if version == 0 {
		return NewEmpty(t)
	}
	d := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mg, err := schema.NewMigrator(ctx, d.Pool)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer mg.Close()
	if down := len(schema.Versions()) - int(version); down > 0 {
		if err := mg.Down(ctx, down); err != nil {
			t.Fatalf("testdb: migrate %s down to version %d: %v", d.Schema, version, err)
		}
	}
	return d
}
