package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/schema"
	"github.com/hopperq/hopper/worker"
)

// TestRunNotMigrated: on a schema migrated only part of the way (an
// upgrade without `hopper migrate up`), or not at all, Run refuses to
// start with jobs.ErrNotMigrated, naming the schema's version and the
// migrations it lacks, the version this build needs, and what to run;
// also on version 9, which a worker of this build would otherwise run on
// (migration 9 changes the keys' collation, which no start-up statement
// notices).
func TestRunNotMigrated(t *testing.T) {
	t.Parallel()
	needs := fmt.Sprintf("this build of Hopper needs schema version %d; run `hopper migrate up` (or schema.Up)", schema.Latest())
	for v := uint(0); v < schema.Latest(); v++ {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d := testdb.NewAtVersion(t, v)
			w, err := worker.New(d.Pool, fast(worker.Config{}))
			require.NoError(t, err)
			require.NoError(t, worker.Handle(w, kind(t, "x"), noopTask))
			err = w.Run(ctx)
			require.ErrorIs(t, err, jobs.ErrNotMigrated)
			require.ErrorContains(t, err, needs)
			state := fmt.Sprintf("hopper: schema not migrated: schema %s is at version %d without migration", d.Schema, v)
			if v == 0 {
				state = "hopper: schema not migrated: no hopper_jobs table on the search_path: "
			}
			require.ErrorContains(t, err, state)
		})
	}
}
