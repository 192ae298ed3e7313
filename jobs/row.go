package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what Hopper runs its statements on: a *pgxpool.Pool, a *pgx.Conn,
// a pgx.Tx, or the transaction your own sqlc code runs on (it has the same
// methods as the DBTX interface sqlc generates). Given a transaction, what
// Hopper writes commits or rolls back with it.
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// State is where a job is in its life.
type State string

// A live job is pending, scheduled, waiting or running; a finished one completed
// (kept only by the kinds and queues that keep history), dead or
// cancelled.
const (
	// StatePending: ready to run; the next claim of its queue may take it.
	StatePending State = "pending"
	// StateScheduled: due later (delayed, snoozed, or waiting out a
	// retry's backoff); workers make it pending when its time comes.
	StateScheduled State = "scheduled"
	// StateWaiting: behind another job of its sequence (Sequence), or a
	// workflow step whose parents have not all ended (Workflow); the end
	// of the job ahead of it, or of its last parent, makes it pending (or
	// scheduled).
	StateWaiting State = "waiting"
	// StateRunning: claimed by a worker, under a lease.
	StateRunning State = "running"
	// StateCompleted: its handler succeeded (in the history table).
	StateCompleted State = "completed"
	// StateDead: out of attempts, failed permanently, or undecodable.
	StateDead State = "dead"
	// StateCancelled: cancelled by an operator or by its own handler.
	StateCancelled State = "cancelled"
)

// States lists every state, live ones first.
func States() []State {
	return []State{StatePending, StateScheduled, StateWaiting, StateRunning, StateCompleted, StateDead, StateCancelled}
}

// Live reports whether a job in this state is still in the job table.
func (s State) Live() bool {
	return s == StatePending || s == StateScheduled || s == StateWaiting || s == StateRunning
}

// ParseState reads a state's name, as the CLI and the dashboard take it.
// Errors wrap ErrInvalidState.
func ParseState(name string) (State, error) {
	for _, s := range States() {
		if string(s) == name {
			return s, nil
		}
	}
	names := make([]string, 0, 7)
	for _, s := range States() {
		names = append(names, string(s))
	}
	return "", fmt.Errorf("%w: %q (one of %s)", ErrInvalidState, name, strings.Join(names, ", "))
}

// Row is a job as Hopper stores it, in any state: its payload is still
// JSON (a kind's Decode makes a typed Job of it). The operations API
// returns rows; so does anything that reads a job it may not have a Go
// type for.
type Row struct {
	ID    int64  `json:"id"`
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	// Version is the payload version the job was enqueued with.
	Version int             `json:"version"`
	Payload json.RawMessage `json:"payload"`
	State   State           `json:"state"`
	// Priority: 0 runs first, 9 last.
	Priority int `json:"priority"`
	// RunAt is when the job is (or, once finished, was last) due.
	RunAt time.Time `json:"run_at"`
	// Attempt counts claims of this job so far; MaxAttempts is how many it
	// may have (a claim given back, or a snooze, adds one to both: see
	// Attempts for the count that leaves those out).
	Attempt     int `json:"attempt"`
	MaxAttempts int `json:"max_attempts"`
	// LeaseOwner and LeaseUntil name the worker running the job and when
	// its lease ends: set only while it is running.
	LeaseOwner string     `json:"lease_owner,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// UniqueKey is the job's unique key, "" for none.
	UniqueKey string `json:"unique_key,omitempty"`
	// ConcurrencyKey is the job's concurrency key (flow control), "" for
	// none.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// Errors is the history of attempts that did not succeed, oldest first.
	Errors    []AttemptError `json:"errors"`
	CreatedAt time.Time      `json:"created_at"`
	// FinishedAt is when the job completed, died or was cancelled; nil
	// while it is live.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Reason says why a dead or cancelled job ended.
	Reason string `json:"reason,omitempty"`
	// Result is what the handler returned (a completed job of a kind
	// handled with a result), as JSON; nil otherwise.
	Result json.RawMessage `json:"result,omitempty"`
	// Meta is the job's metadata (Metadata, enqueue hooks).
	Meta Meta `json:"meta,omitempty"`
	// Progress is the last progress the job's durable handler recorded
	// (worker.SetProgress), kept while the job lives. hopper.Client's
	// GetJob sets it; lists leave it nil.
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is a progress value a durable handler recorded
// (worker.SetProgress): small JSON, and when it was set.
type Progress struct {
	Value     json.RawMessage `json:"value"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// AttemptError is one attempt in a job's history that did not succeed: a
// failure, a lost lease ("lease expired"), or the handler's own cancel.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Owner   string    `json:"owner"`
	Error   string    `json:"error"`
}

// ParseErrors decodes a job's stored error history (the errors column).
func ParseErrors(raw json.RawMessage) ([]AttemptError, error) {
	var history []AttemptError
	if len(raw) == 0 || string(raw) == "[]" { // most jobs have not failed yet
		return nil, nil
	}
	if err := json.Unmarshal(raw, &history); err != nil {
		return nil, fmt.Errorf("error history: %w", err)
	}
	return history, nil
}

// MetaUncharged is the metadata key under which Hopper counts a job's
// claims given back without being charged an attempt: at a worker's
// shutdown, or by a snooze. Each adds one to Attempt and MaxAttempts.
const MetaUncharged = "hopper.uncharged"

// Attempts is the job's attempts as they count against its limit: the
// claims charged so far, and how many it may be charged in all. Claims
// given back uncharged (MetaUncharged) are left out of both, so a job
// given back once at shutdown before it ran shows 0 of 25, not 1 of 26.
func (r Row) Attempts() (charged, allowed int) {
	uncharged, err := strconv.Atoi(r.Meta[MetaUncharged])
	if err != nil || uncharged < 0 {
		uncharged = 0
	}
	// Never more than the claims made, nor so many that no attempt is
	// left to allow (an edit of MaxAttempts may have lowered it).
	uncharged = min(uncharged, r.Attempt, max(r.MaxAttempts-1, 0))
	return r.Attempt - uncharged, r.MaxAttempts - uncharged
}
