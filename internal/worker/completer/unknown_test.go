package completer

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// faultyConn runs statements on conn, but the first one whose SQL contains
// marker fails with err: after it ran and committed (committed), or
// without running.
type faultyConn struct {
	db.DBTX
	marker    string
	err       error
	committed bool

	mu    sync.Mutex
	sent  int // statements with marker sent (the faulted one included)
	fired bool
}

func (f *faultyConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !strings.Contains(sql, f.marker) {
		return f.DBTX.Query(ctx, sql, args...)
	}
	f.mu.Lock()
	f.sent++
	fire := !f.fired
	f.fired = true
	f.mu.Unlock()
	if !fire {
		return f.DBTX.Query(ctx, sql, args...)
	}
	if f.committed {
		rows, err := f.DBTX.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return nil, f.err
}

func (f *faultyConn) sentCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// A batch whose commit's outcome is unknown (a lost reply; a Citus
// coordinator that could not see a worker node's commit through; a
// backend terminated during its commit) is settled from what the rows
// show before anything is sent again: each result that took effect is
// reported as such, never refused, and its statement is not sent again;
// only a batch that took no effect is sent again. A refusal (the server's
// error: no effect) is sent again as it was.
func TestCompleterReadsFirstAfterAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	fails := map[string]error{
		"a lost reply":                   io.ErrUnexpectedEOF,
		"Citus's failed remote commit":   &pgconn.PgError{Severity: "ERROR", Code: "XX000", Message: "could not commit transaction for shard 102008 on at least one active node"},
		"Citus's lost node connection":   &pgconn.PgError{Severity: "ERROR", Code: "08006", Message: "connection to the remote node postgres@localhost:9701 failed with the following error: server closed the connection unexpectedly"},
		"a backend terminated at commit": &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"},
	}
	type action struct {
		marker string
		act    Action
		want   Outcome
	}
	actions := map[string]action{
		"acks":  {"-- name: AckBatch :many", ActionAck, OutcomeDone},
		"nacks": {"-- name: NackBatch :many", ActionRetry, OutcomeFailed},
	}
	for fname, fail := range fails {
		for aname, a := range actions {
			for _, committed := range []bool{true, false} {
				name := fname + "/" + aname
				if committed {
					name += "/took effect"
				} else {
					name += "/took no effect"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					b := newCompleterBed(t, 10)
					conn := &faultyConn{DBTX: b.DB.Pool, marker: a.marker, err: fail, committed: committed}
					b.cp.cfg.Queries = db.New(conn)
					held := b.claim(t, 3)
					var batch []Completion
					for _, j := range held {
						batch = append(batch, Completion{Job: j, Action: a.act, Message: "boom", Backoff: time.Hour})
					}
					b.cp.flush(batch)
					got := b.outcomes()
					for _, j := range held {
						require.Equal(t, a.want, got[j.id], "job %d", j.id)
					}
					if committed {
						require.Equal(t, 1, conn.sentCount(), "what took effect is read, not sent again")
					} else {
						require.Equal(t, 2, conn.sentCount(), "what took no effect is sent again")
					}
				})
			}
		}
	}
	t.Run("a refusal", func(t *testing.T) {
		t.Parallel()
		b := newCompleterBed(t, 10)
		conn := &faultyConn{DBTX: b.DB.Pool, marker: "-- name: AckBatch :many",
			err: &pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "could not serialize access due to concurrent update"}}
		b.cp.cfg.Queries = db.New(conn)
		held := b.claim(t, 2)
		b.cp.flush([]Completion{{Job: held[0], Action: ActionAck}, {Job: held[1], Action: ActionAck}})
		got := b.outcomes()
		require.Equal(t, OutcomeDone, got[held[0].id])
		require.Equal(t, OutcomeDone, got[held[1].id])
		require.Equal(t, 2, conn.sentCount(), "sent again as it was")
	})
}

// An unknown outcome's results whose fate cannot be read yet stay unknown
// and are read again, never sent blindly; one of several settled by the
// read (the job acknowledged) is reported done while the rest, intact,
// are sent again.
func TestCompleterSendsAgainOnlyWhatTookNoEffect(t *testing.T) {
	t.Parallel()
	b := newCompleterBed(t, 10)
	held := b.claim(t, 3)
	// The earlier try took effect for held[0] only (the others' rows were
	// intact when the read came).
	_, err := b.Q.AckBatch(b.Ctx, db.AckBatchParams{Ids: []int64{held[0].id}, Attempts: []int32{held[0].attempt}})
	require.NoError(t, err)
	conn := &faultyConn{DBTX: b.DB.Pool, marker: "-- name: AckBatch :many"}
	conn.fired = true // no fault: count what is sent
	b.cp.cfg.Queries = db.New(conn)
	var batch []Completion
	for _, j := range held {
		batch = append(batch, Completion{Job: j, Action: ActionAck, ambiguous: true, unknown: true})
	}
	b.cp.flush(batch)
	got := b.outcomes()
	for _, j := range held {
		require.Equal(t, OutcomeDone, got[j.id])
	}
	require.Equal(t, 1, conn.sentCount(), "one ack batch, for the two intact claims")
}
