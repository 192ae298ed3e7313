package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hopperq/hopper/db"
)

// Uniqueness beyond the live job table. A unique key (UniqueKey, or one a
// kind derives from the payload: UniqueBy, UniqueFields) is held by its
// live job (pending, scheduled or running) in every mode: the job table's
// unique index. UniqueStates and UniquePeriod make finished jobs hold it
// too; ReplaceWaiting and Debounce make a new enqueue update the waiting
// job that holds it. Those modes are decided against three tables, so
// their enqueues are serialized on the key: see LockEnqueueKeys in
// queries/enqueue.sql and lockedEnqueue below.

// UniqueStates chooses the states whose jobs hold the unique key. Live
// jobs always hold it (StatePending, StateScheduled and StateRunning may be
// named, and change nothing); add StateCompleted, StateDead and
// StateCancelled to keep the key held after the job finished, for as long
// as the finished job is kept (completed jobs only when the kind or queue
// keeps history, unless UniquePeriod is set: see there), or within
// UniquePeriod. Without this option and without
// a period only live jobs hold the key. A job without a unique key ignores
// it. An unknown state is refused with ErrInvalidState.
func UniqueStates(states ...State) EnqueueOption {
	return func(o *enqueueOptions) { o.uniqueStates = slices.Clone(states); o.uniqueStatesSet = true }
}

// UniquePeriod makes the unique key held by any job that has it and was
// enqueued less than d ago, finished ones included, so that a key is
// enqueued at most once per d ("sync this account at most once an hour").
// The window slides: it is measured from each job's enqueue time
// (created_at) with the database's clock, at a millisecond's resolution.
// Finished jobs count in the states chosen by UniqueStates, or all of
// completed, dead and cancelled when it is not given. A completed job
// counts for the whole period whether or not history is kept: the enqueue
// records the key, with the job's id and enqueue time, in
// hopper_unique_periods, which workers prune once the period is over. A
// live job holds its key whatever its age. 0 means no period. A job
// without a unique key ignores it.
func UniquePeriod(d time.Duration) EnqueueOption {
	return func(o *enqueueOptions) { o.uniquePeriod = d }
}

// ReplaceWaiting makes an enqueue whose unique key is held by a waiting job
// (pending or scheduled) give that job its payload instead of being
// skipped: the result says Replaced, with the waiting job's id. The job
// keeps its run time, queue, priority, attempts, metadata and concurrency
// key. Only a holder of the same kind is replaced (another kind's payload
// would not decode): one of another kind is kept, as is a running holder
// of another kind. A holder whose durable handler recorded anything (a
// step, a sleep) counts as running: its records were made for its
// payload. A running job is never changed: with live keys only (no
// UniqueStates, no UniquePeriod) it gives up the key, and the new job is
// inserted to run after it, so that the latest payload always runs (the
// running job then shows no unique key); where finished jobs hold the key,
// a running or finished holder is kept, as without this option. A job
// without a unique key ignores it.
func ReplaceWaiting() EnqueueOption {
	return func(o *enqueueOptions) { o.replace, o.pushRunAt = true, false }
}

// Debounce makes a burst of enqueues of one unique key run once, with the
// latest payload, d after the last of them: the job is enqueued to run d
// from now (as Delay(d)), and an enqueue that finds it still waiting gives
// it its payload and pushes its run time to d from now (ReplaceWaiting, and
// the run time too). Once the job runs, the next enqueue of the key starts
// a new job, which takes the key from the running one (see ReplaceWaiting):
// the payload of the last enqueue of a burst is the one that runs last. A
// job without a unique key is only delayed.
func Debounce(d time.Duration) EnqueueOption {
	return func(o *enqueueOptions) { o.replace, o.pushRunAt, o.delay = true, true, d }
}

// finishedStates are the finished states whose jobs hold the key, as the
// statement takes them.
func (o *enqueueOptions) finishedStates() []string {
	var out []string
	if !o.uniqueStatesSet {
		if o.uniquePeriod > 0 {
			out = []string{string(StateCompleted), string(StateDead), string(StateCancelled)}
		}
		return out
	}
	for _, s := range []State{StateCompleted, StateDead, StateCancelled} {
		if slices.Contains(o.uniqueStates, s) {
			out = append(out, string(s))
		}
	}
	return out
}

// locked reports whether the job's enqueue needs the key's lock: its
// answer depends on more than the live job table's unique index.
func (o *enqueueOptions) locked() bool {
	return o.sequence != nil || o.lockedUnique()
}

// lockedUnique reports whether the job's unique key needs the locked
// statements (EnqueueUnique): a batch of sequence jobs without them takes
// the keys' locks and the plain statements (insertSequenced).
func (o *enqueueOptions) lockedUnique() bool {
	return o.uniqueKey != nil && (o.replace || o.uniquePeriod > 0 || len(o.finishedStates()) > 0)
}

func (o *enqueueOptions) validateUnique() error {
	for _, s := range o.uniqueStates {
		if !slices.Contains(States(), s) {
			return fmt.Errorf("%w: %q in UniqueStates", ErrInvalidState, s)
		}
	}
	if o.uniquePeriod < 0 {
		return fmt.Errorf("%w: negative unique period %v", ErrInvalidUniqueKey, o.uniquePeriod)
	}
	return nil
}

// periodMs is the period in whole milliseconds, at least 1 when set.
func (o *enqueueOptions) periodMs() int64 {
	if o.uniquePeriod <= 0 {
		return 0
	}
	return max(1, o.uniquePeriod.Milliseconds())
}

// UniqueBy derives each job's unique key from its payload, so that callers
// cannot forget it: the key is the kind's name, a colon, and what fn
// returns (an empty string: no key), so kinds never share keys by
// accident. A UniqueKey given at enqueue overrides it. T must be the
// kind's payload type. The modes (UniqueStates, UniquePeriod,
// ReplaceWaiting, Debounce) are set with Defaults or per enqueue.
func UniqueBy[T any](fn func(T) string) DefineOption {
	return func(d *definition) {
		if fn == nil {
			d.errs = append(d.errs, errors.New("UniqueBy: nil function"))
			return
		}
		if d.uniqueOf != nil || d.uniqueFields != nil {
			d.errs = append(d.errs, errors.New("UniqueBy and UniqueFields: give one"))
			return
		}
		d.uniqueOf = fn
	}
}

// UniqueFields derives each job's unique key from the named top-level
// fields of its encoded payload (their JSON names), so that callers cannot
// forget it: the key is the kind's name, a colon, and the fields' values
// as a JSON array in the order named (a missing field is null), such as
// `sync-account:[42,"eu"]`. A UniqueKey given at enqueue overrides it; a
// key over MaxUniqueKeyLength is refused (ErrInvalidUniqueKey).
func UniqueFields(fields ...string) DefineOption {
	return func(d *definition) {
		switch {
		case len(fields) == 0 || slices.Contains(fields, ""):
			d.errs = append(d.errs, errors.New("UniqueFields: name one field or more, none empty"))
		case d.uniqueOf != nil || d.uniqueFields != nil:
			d.errs = append(d.errs, errors.New("UniqueBy and UniqueFields: give one"))
		default:
			d.uniqueFields = slices.Clone(fields)
		}
	}
}

// deriveUniqueKey sets the unique key from the payload (UniqueBy,
// UniqueFields) when no option gave one.
func (k *Kind[T]) deriveUniqueKey(payload T, raw json.RawMessage, o *enqueueOptions) error {
	if o.uniqueKey != nil || (k.uniqueOf == nil && k.uniqueFields == nil) {
		return nil
	}
	var part string
	if k.uniqueOf != nil {
		p, err := k.uniqueOf(payload)
		if err != nil || p == "" {
			return err
		}
		part = p
	} else {
		p, err := fieldsKey(raw, k.uniqueFields)
		if err != nil {
			return err
		}
		part = p
	}
	key := k.name + ":" + part
	o.uniqueKey = &key
	return checkKey(o.uniqueKey, ErrInvalidUniqueKey, MaxUniqueKeyLength)
}

// fieldsKey is the JSON array of the named fields' values in raw.
func fieldsKey(raw json.RawMessage, fields []string) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("%w: UniqueFields needs a payload that encodes as a JSON object: %v", ErrInvalidUniqueKey, err)
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		v, ok := obj[f]
		if !ok {
			b.WriteString("null")
			continue
		}
		if err := json.Compact(&b, v); err != nil {
			return "", fmt.Errorf("%w: field %q: %v", ErrInvalidUniqueKey, f, err)
		}
	}
	b.WriteByte(']')
	return b.String(), nil
}

// EnqueueOutcome is what an enqueue did with one job: inserted it, gave
// its payload to the waiting job holding its unique key, or kept that
// holder as it was. (What a worker did with a job it ran is another
// thing: worker.Outcome.)
type EnqueueOutcome string

const (
	// EnqueueInserted: a new job was inserted.
	EnqueueInserted EnqueueOutcome = "inserted"
	// EnqueueReplaced: the waiting job holding the unique key took this
	// payload (ReplaceWaiting, Debounce); nothing was inserted.
	EnqueueReplaced EnqueueOutcome = "replaced"
	// EnqueueKept: a job holding the unique key was left as it was;
	// nothing was inserted.
	EnqueueKept EnqueueOutcome = "kept"
)

// Outcome says which of inserted, replaced and kept happened.
func (r Result) Outcome() EnqueueOutcome {
	switch {
	case !r.Duplicate:
		return EnqueueInserted
	case r.Replaced:
		return EnqueueReplaced
	default:
		return EnqueueKept
	}
}

// uniqueParams is one job as EnqueueUnique takes it.
func uniqueParams(kind string, version int, raw json.RawMessage, o *enqueueOptions) db.EnqueueUniqueParams {
	states := o.finishedStates()
	if states == nil {
		states = []string{}
	}
	return db.EnqueueUniqueParams{
		Queue: o.queue, Kind: kind, Version: int32(version), Payload: raw, Priority: int16(o.priority),
		RunAt: o.runAtOrLongAgo(), DelayMs: o.delay.Milliseconds(), MaxAttempts: int32(o.maxAttempts),
		UniqueKey: o.uniqueKey, Meta: o.metaRaw, ConcurrencyKey: o.key,
		States: states, PeriodMs: o.periodMs(), Replace: o.replace, PushRunAt: o.pushRunAt,
		TakeFromRunning: o.replace && len(states) == 0,
	}
}

// outcomeRaced is EnqueueUnique's kept that no order of the enqueues
// explains: the holder changed under the statement.
const outcomeRaced EnqueueOutcome = "raced"

// resultOf reads EnqueueUnique's answer.
func resultOf(id int64, outcome string) (Result, error) {
	switch EnqueueOutcome(outcome) {
	case EnqueueInserted:
		return Result{ID: id}, nil
	case EnqueueReplaced:
		return Result{ID: id, Duplicate: true, Replaced: true}, nil
	case EnqueueKept, outcomeRaced:
		return Result{ID: id, Duplicate: true}, nil
	}
	return Result{}, fmt.Errorf("the enqueue statement answered %q", outcome)
}

// lockedEnqueue enqueues jobs with EnqueueUnique (one job) or
// EnqueueUniqueBatch (one statement per round of distinct keys, see
// lockedSend), after LockEnqueueKeys has locked all their keys, all in one
// transaction: so each job's answer is what enqueueing them one by one
// would give, and no other locked enqueue of those keys runs between the
// check and the write.
//
// Why an advisory lock and not a table of keys: the lock costs no write,
// no migration, no vacuum, and PostgreSQL frees it with the transaction,
// rolled back or not, so a caller's rolled-back enqueue frees its key and
// a crashed one cannot leave a key taken. Why a statement of its own: the
// lock must be granted before the snapshot of the statement that decides
// (see LockEnqueueKeys).
//
// How the statements are sent: to a pool, a connection or a transaction
// (anything that sends pgx batches), as one pipelined batch, one round
// trip; outside a transaction the batch is one implicit transaction, which
// the server commits at its end, and inside the caller's the lock is held
// until that transaction ends. To a DBTX that cannot send batches but can
// begin a transaction (InSchema's), in a transaction begun on it (a
// savepoint inside the caller's), one round trip per statement. To any
// other DBTX one by one: it must then be a transaction, or the lock is
// released before the job is written.
func lockedEnqueue(ctx context.Context, dbtx DBTX, jobs []db.EnqueueUniqueParams, sequences []string) ([]Result, error) {
	out, raced, err := lockedSend(ctx, dbtx, jobs, sequences)
	if err != nil {
		return nil, err
	}
	// A replace that met its holder as it was being claimed (or a live
	// key enqueued meanwhile without the lock) is kept, which no order of
	// the enqueues explains (the statement says raced): the job should
	// have been replaced, or have taken the key from the running job.
	// Send it again, alone, unless a later job of the batch has its key
	// (whose payload wins anyway): its statement then sees the claim.
	for i := range jobs {
		again := raced[i]
		for try := 0; try < 3 && again && lastOfKey(jobs, i); try++ {
			res, r, err := lockedSend(ctx, dbtx, jobs[i:i+1], sequences[i:i+1])
			if err != nil {
				return nil, err
			}
			out[i], again = res[0], r[0]
		}
	}
	return out, nil
}

// lastOfKey reports whether no job after jobs[i] has its unique key.
func lastOfKey(jobs []db.EnqueueUniqueParams, i int) bool {
	for _, j := range jobs[i+1:] {
		if j.UniqueKey != nil && *j.UniqueKey == *jobs[i].UniqueKey {
			return false
		}
	}
	return true
}

// lockedSend sends the locks, then the jobs' statements: EnqueueUnique for
// one job; for more, EnqueueUniqueBatch once per round, where round r holds
// the jobs whose key comes for the r-th time in the batch (jobs without a
// key go in the first). Keys do not meet across jobs of different keys, so
// the rounds, in order, answer as the jobs one by one would; a batch
// without repeated keys is one statement.
func lockedSend(ctx context.Context, dbtx DBTX, jobs []db.EnqueueUniqueParams, sequences []string) (out []Result, raced []bool, err error) {
	keys := make([]string, 0, len(jobs))
	var held []string // the keys whose holders a statement may lock
	for _, j := range jobs {
		if j.UniqueKey != nil {
			keys = append(keys, *j.UniqueKey)
			if j.Replace {
				held = append(held, *j.UniqueKey)
			}
		}
	}
	if len(jobs) == 1 { // one row lock at most: no order to keep
		held = nil
	}
	rounds := roundsOf(jobs)
	statements := make([]func(q *db.Queries) ([]db.EnqueueUniqueBatchRow, error), len(rounds))
	for r, round := range rounds {
		statements[r] = func(q *db.Queries) ([]db.EnqueueUniqueBatchRow, error) {
			if len(jobs) == 1 {
				row, err := q.EnqueueUnique(ctx, jobs[0])
				return []db.EnqueueUniqueBatchRow{{ID: row.ID, Outcome: row.Outcome}}, err
			}
			return q.EnqueueUniqueBatch(ctx, batchParams(jobs, round))
		}
	}
	locks := func(q *db.Queries) error {
		if err := q.LockEnqueueKeys(ctx, db.LockEnqueueKeysParams{UniqueKeys: keys, SequenceKeys: sequences}); err != nil {
			return err
		}
		if len(held) > 0 {
			return q.LockUniqueHolders(ctx, held)
		}
		return nil
	}
	out, raced = make([]Result, len(jobs)), make([]bool, len(jobs))
	answer := func(r int, rows []db.EnqueueUniqueBatchRow) error {
		if len(rows) != len(rounds[r]) {
			return fmt.Errorf("the enqueue statement answered %d rows for %d jobs", len(rows), len(rounds[r]))
		}
		for i, row := range rows {
			res, err := resultOf(row.ID, row.Outcome)
			if err != nil {
				return err
			}
			out[rounds[r][i]] = res
			raced[rounds[r][i]] = row.Outcome == string(outcomeRaced)
		}
		return nil
	}
	run := func(q *db.Queries) error {
		if err := locks(q); err != nil {
			return err
		}
		for r, st := range statements {
			rows, err := st(q)
			if err == nil {
				err = answer(r, rows)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	switch d := dbtx.(type) {
	case batchSender:
		err = pipelined(ctx, d, locks, statements, answer)
	case interface {
		Begin(context.Context) (pgx.Tx, error)
	}:
		err = inTx(ctx, dbtx, run)
	default:
		err = run(db.New(dbtx))
	}
	if err != nil {
		return nil, nil, err
	}
	return out, raced, nil
}

// batchSender sends pgx batches: a pool, a connection, a transaction.
type batchSender interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// roundsOf splits jobs into rounds of jobs with distinct keys, each a list
// of indexes into jobs, in order.
func roundsOf(jobs []db.EnqueueUniqueParams) [][]int {
	var rounds [][]int
	seen := map[string]int{}
	for i, j := range jobs {
		r := 0
		if j.UniqueKey != nil {
			r = seen[*j.UniqueKey]
			seen[*j.UniqueKey] = r + 1
		}
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], i)
	}
	return rounds
}

// batchParams is one round's jobs as EnqueueUniqueBatch takes them.
func batchParams(jobs []db.EnqueueUniqueParams, round []int) db.EnqueueUniqueBatchParams {
	var p db.EnqueueUniqueBatchParams
	for _, i := range round {
		j := jobs[i]
		key, concurrency := "", ""
		if j.UniqueKey != nil {
			key = *j.UniqueKey
		}
		if j.ConcurrencyKey != nil {
			concurrency = *j.ConcurrencyKey
		}
		p.Queues = append(p.Queues, j.Queue)
		p.Kinds = append(p.Kinds, j.Kind)
		p.Versions = append(p.Versions, j.Version)
		p.Payloads = append(p.Payloads, j.Payload)
		p.Priorities = append(p.Priorities, j.Priority)
		p.RunAts = append(p.RunAts, j.RunAt)
		p.DelaysMs = append(p.DelaysMs, j.DelayMs)
		p.MaxAttempts = append(p.MaxAttempts, j.MaxAttempts)
		p.UniqueKeys = append(p.UniqueKeys, key)
		p.Metas = append(p.Metas, j.Meta)
		p.ConcurrencyKeys = append(p.ConcurrencyKeys, concurrency)
		p.Finished = append(p.Finished, strings.Join(j.States, ","))
		p.PeriodsMs = append(p.PeriodsMs, j.PeriodMs)
		p.Replaces = append(p.Replaces, j.Replace)
		p.PushRunAts = append(p.PushRunAts, j.PushRunAt)
		p.TakeFromRunning = append(p.TakeFromRunning, j.TakeFromRunning)
	}
	return p
}

// pipelined sends the locks and the statements as one pgx batch, their SQL
// recorded from the generated methods, and reads the statements' answers.
func pipelined(ctx context.Context, sender batchSender, locks func(*db.Queries) error, statements []func(*db.Queries) ([]db.EnqueueUniqueBatchRow, error),
	answer func(int, []db.EnqueueUniqueBatchRow) error) error {
	rec := &recorder{}
	_ = locks(db.New(rec))
	b := &pgx.Batch{}
	for _, st := range rec.all {
		b.Queue(st.sql, st.args...)
	}
	nlocks := len(rec.all)
	for _, st := range statements {
		_, _ = st(db.New(rec))
	}
	for _, st := range rec.all[nlocks:] {
		b.Queue(st.sql, st.args...)
	}
	br := sender.SendBatch(ctx, b)
	var err error
	for range nlocks {
		if err == nil {
			_, err = br.Exec()
		}
	}
	for r := 0; err == nil && r < len(statements); r++ {
		var rows []db.EnqueueUniqueBatchRow
		var pr pgx.Rows
		pr, err = br.Query()
		if err == nil {
			rows, err = pgx.CollectRows(pr, func(row pgx.CollectableRow) (db.EnqueueUniqueBatchRow, error) {
				var x db.EnqueueUniqueBatchRow
				return x, row.Scan(&x.ID, &x.Outcome)
			})
		}
		if err == nil {
			err = answer(r, rows)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// recorder is a DBTX that keeps the last statement it was asked to run,
// and runs nothing: the generated methods' SQL and arguments, for a batch.
type recorder struct {
	all []recorded
}

type recorded struct {
	sql  string
	args []any
}

var errRecorded = errors.New("hopper: statement recorded, not run")

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.all = append(r.all, recorded{sql, args})
	return pgconn.CommandTag{}, nil
}

func (r *recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.all = append(r.all, recorded{sql, args})
	return nil, errRecorded
}

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.all = append(r.all, recorded{sql, args})
	return recordedRow{}
}

func (r *recorder) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errRecorded
}

type recordedRow struct{}

func (recordedRow) Scan(...any) error { return errRecorded }
