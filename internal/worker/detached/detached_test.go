package detached

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hopperq/hopper/jobs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type run struct{ extended []time.Duration }

func (r *run) ExtendLease(d time.Duration) { r.extended = append(r.extended, d) }
func (r *run) AckTx(jobs.DBTX)             {}

// A context carries the run it was given, and a worker's carries none.
func TestWithFrom(t *testing.T) {
	t.Parallel()
	require.Nil(t, From(context.Background()))
	r := &run{}
	ctx := With(context.Background(), r)
	require.Same(t, r, From(ctx))
	From(ctx).ExtendLease(time.Second)
	require.Equal(t, []time.Duration{time.Second}, r.extended)
	require.Same(t, r, From(context.WithoutCancel(ctx)), "a context derived from it carries it too")
}
