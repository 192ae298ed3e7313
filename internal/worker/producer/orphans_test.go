package producer

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/worker/commitfate"
)

// After a claim whose commit's outcome is unknown, the next claim first
// runs the jobs that claim took for the worker (leased to it, not held),
// as the claim had taken them (same attempt, nothing charged), within its
// free slots; it leaves alone the jobs the worker holds, the jobs it let
// go before that claim (their leases end before the claim's), and other
// workers' jobs. A refused claim (the server's error) looks for nothing.
func TestProducerRunsAnUnansweredClaimsJobs(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		fail     error
		slots    int
		lookedUp bool // the claim's error is an unknown outcome: its jobs are found
	}{
		"a lost reply":                  {fail: io.ErrUnexpectedEOF, slots: 10, lookedUp: true},
		"Citus's failed remote commit":  {fail: &pgconn.PgError{Severity: "ERROR", Code: "XX000", Message: "could not commit transaction for shard 102008 on at least one active node"}, slots: 10, lookedUp: true},
		"fewer free slots than orphans": {fail: io.ErrUnexpectedEOF, slots: 1, lookedUp: true},
		"a refusal":                     {fail: &pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "could not serialize access"}, slots: 10},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := passbed.New(t)
			h := &handed{}
			p, err := New(testConfig(b, &batches{}, h.hand))
			require.NoError(t, err)
			base := time.Now().Add(-time.Minute)

			// A job the worker let go long ago (a short lease, no longer
			// extended), one it holds, one of another worker's.
			b.Enqueue(base)
			letGo := b.Claim("w", 1000)
			require.Len(t, letGo, 1)
			b.Enqueue(base)
			held := b.Claim("w", time.Minute.Milliseconds())
			require.Len(t, held, 1)
			b.Enqueue(base)
			other := b.Claim("other", time.Minute.Milliseconds())
			require.Len(t, other, 1)
			p.cfg.Held = func() func(int64, int32) bool {
				return func(id int64, attempt int32) bool { return id == held[0].ID && attempt == held[0].Attempt }
			}

			// The claim that failed: it took two jobs for the worker, whose
			// answer never came; one more job waits.
			var orphans []int64
			for range 2 {
				orphans = append(orphans, b.Enqueue(base))
			}
			sent := time.Now()
			taken := b.Claim("w", time.Minute.Milliseconds())
			require.Len(t, taken, 2)
			waiting := b.Enqueue(base)
			require.ErrorIs(t, p.failed(tc.fail, sent), tc.fail)
			require.Equal(t, tc.lookedUp, errors.Is(p.failed(tc.fail, sent), commitfate.ErrUnknown))

			n, err := p.Claim(b.Ctx, tc.slots)
			require.NoError(t, err)
			switch {
			case !tc.lookedUp:
				require.Equal(t, 1, n, "a refused claim took nothing: nothing is looked for")
				require.Equal(t, []int64{waiting}, h.ids())
				require.Equal(t, "running", b.State(orphans[0]))
				return
			case tc.slots == 1:
				require.Equal(t, 1, n, "no more than the free slots")
				require.Equal(t, orphans[:1], h.ids(), "the first orphan in ready order")
			default:
				require.Equal(t, 3, n, "the orphans, then a claim for the slots left")
				require.Equal(t, append(orphans, waiting), h.ids(), "the orphans first, then the claim's")
			}
			require.Equal(t, p.Running(), n, "a slot per job")
			for _, j := range h.jobs[:len(h.jobs)-min(1, tc.slots-1)] {
				require.Equal(t, int32(1), j.Row.Attempt, "run under the claim that took it")
				require.Equal(t, int32(3), j.Row.MaxAttempts, "nothing charged")
				require.Equal(t, sent, j.Sent, "its lease runs from the claim")
			}
			for _, j := range append(append(letGo, held...), other...) {
				require.NotContains(t, h.ids(), j.ID, "job %d is left alone", j.ID)
			}
			require.True(t, p.unknownSince.IsZero(), "nothing more to look for")
		})
	}
}

// A search for the orphans that fails is tried again before every claim,
// and the claim waits for it.
func TestProducerClaimsNothingUntilTheOrphansAreFound(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	h := &handed{}
	cfg := testConfig(b, &batches{}, h.hand)
	cfg.Queries = db.New(failing{})
	p, err := New(cfg)
	require.NoError(t, err)
	p.unknownSince = time.Now()
	_, err = p.Claim(b.Ctx, 1)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.ErrorContains(t, err, "a claim with no answer took")
	require.False(t, p.unknownSince.IsZero(), "looked for again before the next claim")
}

// failing is a connection every statement of which is lost.
type failing struct{}

func (failing) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, io.ErrUnexpectedEOF
}

func (failing) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, io.ErrUnexpectedEOF
}

func (failing) QueryRow(context.Context, string, ...any) pgx.Row {
	return errRowOf{io.ErrUnexpectedEOF}
}

func (failing) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, io.ErrUnexpectedEOF
}

type errRowOf struct{ err error }

func (r errRowOf) Scan(...any) error { return r.err }
