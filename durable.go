package hopper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/jsonbtext"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/internal/worker/loop"
	"github.com/hopperq/hopper/jobs"
)

// What durable handlers record (worker.Step and the rest), as the
// operations API shows it.

// StepKind is the kind of a durable record: what call made it.
type StepKind string

// The kinds of durable record.
const (
	StepKindStep  StepKind = "step"  // worker.Step, worker.StepTx
	StepKindSleep StepKind = "sleep" // worker.Sleep, worker.SleepUntil
	StepKindEvent StepKind = "event" // worker.AwaitEvent
)

// StepState is where a durable record is.
type StepState string

// The states of a durable record.
const (
	// StepStateDone: a step that ran, or an event that came.
	StepStateDone StepState = "done"
	// StepStateWaiting: a sleep until its Until (it stays so once the time
	// has passed), or an event not come yet, whose deadline is Until.
	StepStateWaiting StepState = "waiting"
	// StepStateTimedOut: an event that did not come before its deadline.
	StepStateTimedOut StepState = "timed_out"
)

// JobStep is one record of a durable job: a step's result, a sleep, or an
// awaited event, in the order the handler made its calls.
type JobStep struct {
	// Position is the call's place in a run, 0 first.
	Position int
	Name     string
	Kind     StepKind
	State    StepState
	// Result is a step's result, or the payload an event brought (JSON).
	Result json.RawMessage
	// Until is a sleep's wake time or an event wait's deadline (zero for a
	// step).
	Until     time.Time
	CreatedAt time.Time
}

// ListJobSteps returns the records of job id, oldest first: none for a
// job that made no durable call, or whose records went with it (a
// completed job's go at its acknowledgement; a dead job keeps them until
// it is purged, for a retry to replay).
func (c *Client) ListJobSteps(ctx context.Context, id int64) ([]JobStep, error) {
	return c.ListJobStepsTx(ctx, c.db, id)
}

// ListJobStepsTx is ListJobSteps on the caller's transaction.
func (c *Client) ListJobStepsTx(ctx context.Context, tx jobs.DBTX, id int64) ([]JobStep, error) {
	rows, err := c.queries(tx).ListSteps(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("steps of job %d: %w", id, err)
	}
	out := make([]JobStep, len(rows))
	for i, r := range rows {
		out[i] = JobStep{Position: int(r.Position), Name: r.Name, Kind: StepKind(r.Kind), State: StepState(r.State),
			Result: r.Result, CreatedAt: r.CreatedAt}
		if r.Until != nil {
			out[i].Until = *r.Until
		}
	}
	return out, nil
}

// Suspension says what a scheduled job waits for, from its records: a
// sleep (StepKindSleep) until Until, or the event Event (StepKindEvent)
// until the deadline Until. Wait is "" for a job in no durable wait.
type Suspension struct {
	Wait  StepKind
	Event string
	Until time.Time
}

// SuspensionOf reads a live job's wait from its state and records
// (ListJobSteps): only a scheduled job whose last record waits, and has
// not reached its time, is suspended.
func SuspensionOf(state jobs.State, steps []JobStep, now time.Time) Suspension {
	if state != jobs.StateScheduled || len(steps) == 0 {
		return Suspension{}
	}
	last := steps[len(steps)-1]
	if last.State != StepStateWaiting || !last.Until.After(now) {
		return Suspension{}
	}
	s := Suspension{Wait: last.Kind, Until: last.Until}
	if last.Kind == StepKindEvent {
		s.Event = last.Name
	}
	return s
}

// GetJobProgress returns job id's last recorded progress (GetJob's
// Row.Progress too): the zero Progress (Value nil, UpdatedAt zero) when
// the job recorded none, or its end took it. Errors wrap ErrNotFound when
// there is no such job, live, dead or kept in the history.
func (c *Client) GetJobProgress(ctx context.Context, id int64) (jobs.Progress, error) {
	return c.GetJobProgressTx(ctx, c.db, id)
}

// GetJobProgressTx is GetJobProgress on the caller's transaction.
func (c *Client) GetJobProgressTx(ctx context.Context, tx jobs.DBTX, id int64) (jobs.Progress, error) {
	r, err := c.queries(tx).GetProgress(ctx, id)
	if isNoRows(err) {
		return jobs.Progress{}, fmt.Errorf("progress of job %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return jobs.Progress{}, fmt.Errorf("progress of job %d: %w", id, err)
	}
	if !r.Recorded {
		return jobs.Progress{}, nil
	}
	return jobs.Progress{Value: r.Progress, UpdatedAt: r.UpdatedAt}, nil
}

// withProgress sets row's Progress, for a live job whose durable handler
// recorded any (only those are marked: a plain job costs no read).
func (c *Client) withProgress(ctx context.Context, tx jobs.DBTX, row *jobs.Row) error {
	if _, marked := row.Meta[metaDurable]; !marked || !row.State.Live() {
		return nil
	}
	p, err := c.GetJobProgressTx(ctx, tx, row.ID)
	switch {
	case err == nil && !p.UpdatedAt.IsZero():
		row.Progress = &p
	case err == nil:
	case !errors.Is(err, ErrNotFound):
		return err
	}
	return nil
}

// metaDurable marks a job whose durable handler recorded anything (its
// records and progress go with it: hopper_durable_ended).
const metaDurable = "hopper.durable"

// MaxEventName and MaxEventPayload bound an event (EmitEvent): its name
// in characters, its payload in bytes as PostgreSQL stores it (jsonb's
// text: a space after every ',' and ':', numbers in plain notation).
const (
	MaxEventName    = 255
	MaxEventPayload = 64 << 10
)

// EmitEvent emits the event name with payload (marshalled to JSON, at
// most MaxEventPayload bytes): every job waiting for it
// (worker.AwaitEvent) becomes pending at once and receives payload, once;
// a job that waits for it later, until the workers prune it
// (worker.Config.EventRetention), receives it too. Emitting a name again
// replaces its payload for the jobs that have not received it yet. It
// returns how many waiting jobs it woke. Errors wrap ErrInvalidEvent for
// a bad name or payload.
func (c *Client) EmitEvent(ctx context.Context, name string, payload any) (int, error) {
	return c.EmitEventTx(ctx, c.db, name, payload)
}

// EmitEventTx is EmitEvent in the caller's transaction: the event is
// emitted when it commits, with the writes that made it true, and not at
// all when it rolls back.
func (c *Client) EmitEventTx(ctx context.Context, tx jobs.DBTX, name string, payload any) (int, error) {
	return c.emitEvent(ctx, tx, nil, name, payload)
}

// EmitEventEncrypted is EmitEvent with the payload encrypted by keyring's
// current key (jobs.Encrypted): it is stored so, with the event and in the
// records of the jobs that receive it, and worker.AwaitEvent decrypts it
// with the keyring of the awaiting job's kind, which must hold the key.
// The ciphertext is bound to the event's name. The name stays in the
// clear, and MaxEventPayload applies to the payload as stored, encrypted:
// about three quarters of it is left for the JSON in the clear.
func (c *Client) EmitEventEncrypted(ctx context.Context, keyring *jobs.Keyring, name string, payload any) (int, error) {
	return c.EmitEventEncryptedTx(ctx, c.db, keyring, name, payload)
}

// EmitEventEncryptedTx is EmitEventEncrypted in the caller's transaction.
func (c *Client) EmitEventEncryptedTx(ctx context.Context, tx jobs.DBTX, keyring *jobs.Keyring, name string, payload any) (int, error) {
	if keyring == nil {
		return 0, fmt.Errorf("emit event %q: %w: nil keyring", name, ErrInvalidEvent)
	}
	return c.emitEvent(ctx, tx, keyring, name, payload)
}

// emitEvent emits an event, its payload encrypted when keyring is given.
func (c *Client) emitEvent(ctx context.Context, tx jobs.DBTX, keyring *jobs.Keyring, name string, payload any) (int, error) {
	if name == "" || utf8.RuneCountInString(name) > MaxEventName || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return 0, fmt.Errorf("emit event %q: %w: want a name of 1 to %d characters of UTF-8 text", name, ErrInvalidEvent, MaxEventName)
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return 0, fmt.Errorf("emit event %q: %w: %w", name, ErrInvalidEvent, err)
	}
	if keyring != nil {
		if raw, err = keyring.SealEvent(name, raw); err != nil {
			return 0, fmt.Errorf("emit event %q: %w", name, err)
		}
	}
	// Measured as the table measures it: jsonb's text, which jsonbtext
	// computes (Go's own JSON is shorter or longer).
	switch n, err := jsonbtext.Len(raw); {
	case err != nil:
		return 0, fmt.Errorf("emit event %q: %w: payload: %w", name, ErrInvalidEvent, err)
	case n > MaxEventPayload:
		return 0, fmt.Errorf("emit event %q: %w: payload of %d bytes as stored (jsonb's text), at most %d", name, ErrInvalidEvent, n, MaxEventPayload)
	}
	woken, err := c.queries(tx).EmitEvent(ctx, db.EmitEventParams{Name: name, Payload: raw})
	if jsonbtext.Refused(err) {
		return 0, fmt.Errorf("emit event %q: %w: %w", name, ErrInvalidEvent, err)
	}
	if err != nil {
		return 0, fmt.Errorf("emit event %q: %w", name, err)
	}
	return int(woken), nil
}

// WakeJob ends the durable wait of job id now: a sleep is over, and a
// wait for an event times out (the handler's AwaitEvent returns
// worker.ErrEventTimeout); the job is pending at once. It returns the
// kind of wait it ended, StepKindSleep or StepKindEvent. Errors wrap ErrNotFound when
// there is no live job id, ErrNotWaiting when the job is in no durable
// wait.
func (c *Client) WakeJob(ctx context.Context, id int64) (StepKind, error) {
	return c.WakeJobTx(ctx, c.db, id)
}

// WakeJobTx is WakeJob in the caller's transaction.
func (c *Client) WakeJobTx(ctx context.Context, tx jobs.DBTX, id int64) (StepKind, error) {
	q := c.queries(tx)
	r, err := q.WakeJob(ctx, id)
	if isNoRows(err) {
		row, gerr := c.GetJobTx(ctx, tx, id)
		switch {
		case gerr != nil:
			return "", fmt.Errorf("wake job %d: %w", id, gerr)
		case !row.State.Live():
			return "", fmt.Errorf("wake job %d: %w (%s)", id, ErrNotFound, row.State)
		}
		return "", fmt.Errorf("wake job %d: %w (%s)", id, ErrNotWaiting, row.State)
	}
	if err != nil {
		return "", fmt.Errorf("wake job %d: %w", id, err)
	}
	// Pending without an insert: tell the queue's workers (the
	// notification goes out when tx commits).
	if err := q.Notify(ctx, db.NotifyParams{Queues: []string{r.Queue}, Priorities: []int16{r.Priority},
		RunAts: []time.Time{r.RunAt}, Ids: []int64{id}}); err != nil {
		return "", fmt.Errorf("wake job %d: announce: %w", id, err)
	}
	return StepKind(r.Kind), nil
}

// WaitJob waits until job id ends (completed, dead or cancelled: a retry
// is not an end) and returns it as it ended, or returns ctx's error. It
// is woken by a notification the job's end sends (the channel
// hopper_job_ended), not by polling: it needs a Client made on a
// *pgxpool.Pool (possibly scoped by jobs.InSchema), from which it holds
// one connection while it waits. As a safety net against a lost
// connection it also reads the job every 30 seconds. Through a pooler
// such as PgBouncer (the server's process id is not the one the
// connection was told), where a LISTEN may not outlive its statement, it
// holds no connection and reads the job every second instead; in
// transaction mode the pool needs pgx's exec mode
// (default_query_exec_mode=exec), which the error says when it is not set.
//
// A completed job is returned whole, its handler's result in Result,
// when its kind or queue keeps history. Without history a completed job
// leaves no row: WaitJob then returns a Row with only ID and State
// (StateCompleted) set, which is also what an operator's DeleteJob of a
// live job looks like. It answers the same whether the job ended while
// it waited or before it began: a job in no table whose id the schema's
// id sequence has handed out ended and left no row. To learn how a job
// ended, and its result, keep history for its kind
// (worker.KeepHistory). Errors wrap ErrNotFound when no job was ever given the
// id (or the role may not read the id sequence, hopper_jobs_id_seq, and
// the job is in no table), ErrWaitUnsupported when the Client has no
// pool. When ctx's deadline passes first, the error wraps
// context.DeadlineExceeded and says what the job still waits for: a
// worker of its queue (or the queue's resume), its handler's end, a
// sleep's end, an event, or the jobs ahead of it.
func (c *Client) WaitJob(ctx context.Context, id int64) (jobs.Row, error) {
	var out jobs.Row
	err := c.waitEnded(ctx, fmt.Sprintf("wait for job %d", id), false,
		func(ctx context.Context, q *db.Queries) (bool, bool, error) {
			r, err := q.MarkJobAwaited(ctx, id)
			return r.Live, r.Live && !r.Marked, err
		},
		func(ctx context.Context, ids []int64, all bool, live bool) (bool, error) {
			if !all && !containsID(ids, id) {
				return false, nil
			}
			row, err := c.GetJob(ctx, id)
			if errors.Is(err, ErrNotFound) && !live {
				// Ended before the wait began, or never enqueued: the id
				// sequence tells which, so that the answer does not
				// depend on when WaitJob began.
				issued, ierr := c.queries(c.db).JobIDIssued(ctx, id)
				if ierr != nil {
					return false, ierr
				}
				live = issued
			}
			switch {
			case errors.Is(err, ErrNotFound) && live:
				out = jobs.Row{ID: id, State: jobs.StateCompleted}
				return true, nil
			case err != nil:
				return false, err
			case row.State.Live():
				return false, nil
			}
			out = row
			return true, nil
		})
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		if why := c.stillLive(ctx, id); why != "" {
			err = fmt.Errorf("%w: %s", err, why)
		}
	}
	if err != nil {
		return jobs.Row{}, err
	}
	return out, nil
}

// WaitWorkflow waits until every step of workflow id has ended, as
// WaitJob does for one job, and returns the steps (ListWorkflow). Steps
// that complete without history are listed no more (ListWorkflow's
// rule). Errors wrap ErrNotFound when no step of it is known.
func (c *Client) WaitWorkflow(ctx context.Context, id string) ([]WorkflowStep, error) {
	var out []WorkflowStep
	err := c.waitEnded(ctx, fmt.Sprintf("wait for workflow %q", id), true,
		func(ctx context.Context, q *db.Queries) (bool, bool, error) {
			r, err := q.MarkWorkflowAwaited(ctx, id)
			return r.Live > 0, r.Unmarked > 0, err
		},
		func(ctx context.Context, _ []int64, _ bool, live bool) (bool, error) {
			steps, err := c.ListWorkflow(ctx, id)
			switch {
			case errors.Is(err, ErrNotFound) && live:
				out = nil // every step completed without history
				return true, nil
			case err != nil:
				return false, err
			}
			for _, s := range steps {
				if s.State.Live() {
					return false, nil
				}
			}
			out = steps
			return true, nil
		})
	return out, err
}

// waitCheckEvery is WaitJob's safety net: how often it reads the job when
// no notification came. unmarkedCheckEvery is how often it reads a job
// that could not be marked (its metadata written past jobs.MaxMetaBytes
// by SQL of its own, with no room left for the mark): its end sends no
// notification.
const (
	waitCheckEvery     = 30 * time.Second
	unmarkedCheckEvery = time.Second
)

// waitEnded listens for hopper_job_ended, marks what it waits for
// (mark reports whether any of it is live, and whether any live one could
// not be marked), then calls ended after each notification of this schema
// (with its ids; all: the list was cut or this is a check of the safety
// net) until it reports the end. With remark, it marks again before each
// check, so that a workflow's steps added since the wait began are
// announced too.
func (c *Client) waitEnded(ctx context.Context, what string, remark bool,
	mark func(context.Context, *db.Queries) (live, unmarked bool, err error),
	ended func(ctx context.Context, ids []int64, all bool, wasLive bool) (bool, error)) error {
	fail := func(err error) error { return fmt.Errorf("%s: %w", what, withPoolerHint(err)) }
	conn, release, err := c.acquireListener(ctx)
	if err != nil {
		return fail(err)
	}
	defer release()
	if conn != nil {
		if err := db.New(conn).ListenJobEnded(ctx); err != nil {
			return fmt.Errorf("%s: listen: %w", what, withPoolerHint(err))
		}
	}
	schema, err := c.queries(c.db).HopperSchema(ctx)
	if err != nil {
		return fail(err)
	}
	live, unmarked, err := mark(ctx, c.queries(c.db))
	if err != nil {
		return fail(err)
	}
	if !live {
		done, err := ended(ctx, nil, true, false)
		switch {
		case err != nil:
			return fail(err)
		case !done:
			return fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		return nil
	}
	for first := true; ; first = false {
		if !first && remark {
			if _, unmarked, err = mark(ctx, c.queries(c.db)); err != nil {
				return fail(err)
			}
		}
		done, err := ended(ctx, nil, true, true)
		if err != nil {
			return fail(err)
		}
		if done {
			return nil
		}
		for {
			every := waitCheckEvery
			if unmarked || conn == nil {
				every = unmarkedCheckEvery
			}
			if conn == nil { // through a pooler: no notification comes
				if !loop.Sleep(ctx, every) {
					return fmt.Errorf("%s: %w", what, ctx.Err())
				}
				break
			}
			wctx, cancel := context.WithTimeout(ctx, every)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w", what, ctx.Err())
			}
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					break // the safety net's check
				}
				return fail(err)
			}
			var msg struct {
				Schema string  `json:"schema"`
				IDs    []int64 `json:"ids"`
				More   bool    `json:"more"`
			}
			if json.Unmarshal([]byte(n.Payload), &msg) != nil || msg.Schema != schema {
				continue
			}
			if remark {
				if _, unmarked, err = mark(ctx, c.queries(c.db)); err != nil { // steps added since
					return fail(err)
				}
			}
			done, err := ended(ctx, msg.IDs, msg.More, true)
			if err != nil {
				return fail(err)
			}
			if done {
				return nil
			}
		}
	}
}

func containsID(ids []int64, id int64) bool {
	for _, v := range ids {
		if v == id {
			return true
		}
	}
	return false
}

// WaitJobResult waits for job id (WaitJob) and decodes the result its
// handler returned (worker.HandleWithResult) into R. The job's kind or
// queue must keep history, or there is no result to read. Errors wrap
// ErrJobFailed when the job ended dead or cancelled (with its reason),
// ErrNoResult when it completed without a kept result, and WaitJob's
// errors.
func WaitJobResult[R any](ctx context.Context, c *Client, id int64) (R, error) {
	var out R
	row, err := c.WaitJob(ctx, id)
	if err != nil {
		return out, err
	}
	switch {
	case row.State != jobs.StateCompleted:
		return out, fmt.Errorf("job %d: %w: %s: %s", id, ErrJobFailed, row.State, row.Reason)
	case len(row.Result) == 0:
		return out, fmt.Errorf("job %d: %w", id, ErrNoResult)
	}
	if err := json.Unmarshal(row.Result, &out); err != nil {
		return out, fmt.Errorf("job %d: decode result: %w", id, err)
	}
	return out, nil
}

// acquireListener takes a connection of the Client's pool for a LISTEN;
// release gives it back unsubscribed (or closes it when that fails). When
// the pool reaches PostgreSQL through a pooler (the server's process id
// differs from the one the connection was told), it gives the connection
// back at once and returns none: in PgBouncer's transaction mode a LISTEN
// holds for its own statement only, and the wait would hear nothing, so
// the caller reads instead.
func (c *Client) acquireListener(ctx context.Context) (*pgx.Conn, func(), error) {
	pool := poolOf(c.db)
	if pool == nil {
		return nil, nil, fmt.Errorf("%w: %T", ErrWaitUnsupported, c.db)
	}
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	conn := pc.Conn()
	pid, err := db.New(conn).BackendPID(ctx)
	if err != nil {
		pc.Release()
		return nil, nil, err
	}
	if uint32(pid) != conn.PgConn().PID() {
		pc.Release()
		return nil, func() {}, nil
	}
	release := func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := db.New(conn).UnlistenJobEnded(uctx); err != nil {
			_ = conn.Close(uctx) // a session still subscribed must not go back to the pool
		}
		pc.Release()
	}
	return conn, release, nil
}

// poolOf is the pool under a Client's handle, or nil.
func poolOf(d jobs.DBTX) *pgxpool.Pool {
	switch v := d.(type) {
	case *pgxpool.Pool:
		return v
	case *schemascope.DB:
		p, _ := v.Inner().(*pgxpool.Pool)
		return p
	}
	return nil
}
