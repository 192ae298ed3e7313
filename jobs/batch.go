package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
)

// Item is one job of an EnqueueMany batch, with options of its own that
// override the call's.
type Item[T any] struct {
	Payload T
	Options []EnqueueOption
}

// Items wraps payloads that need no options of their own.
func Items[T any](payloads ...T) []Item[T] {
	items := make([]Item[T], len(payloads))
	for i, p := range payloads {
		items[i].Payload = p
	}
	return items
}

// Entry is one job of any kind, checked and encoded, for EnqueueBatch.
// Kind.Entry makes one.
type Entry struct {
	kind    string
	version int
	raw     json.RawMessage // as stored
	plain   json.RawMessage // in the clear, for the hooks: raw unless the kind is Encrypted
	o       enqueueOptions
	hooks   []EnqueueHook // the kind's own (OnEnqueue)
	err     error         // why the payload or options were refused
}

// Kind, Queue and UniqueKey say what the entry will enqueue ("" for no
// unique key); Err says why it would be refused (nil: it is valid).
func (e Entry) Kind() string  { return e.kind }
func (e Entry) Queue() string { return e.o.queue }
func (e Entry) UniqueKey() string {
	if e.o.uniqueKey == nil {
		return ""
	}
	return *e.o.uniqueKey
}
func (e Entry) Err() error { return e.err }

// ConcurrencyKey is the entry's concurrency key, "" for none.
func (e Entry) ConcurrencyKey() string {
	if e.o.key == nil {
		return ""
	}
	return *e.o.key
}

// SequenceKey is the entry's sequence key, "" for none: given by the
// Sequence option, by MetaSequence in its metadata, or derived by the
// kind's SequenceBy.
func (e Entry) SequenceKey() string { return e.o.sequenceKey() }

// Priority and MaxAttempts are the entry's, its kind's defaults applied.
func (e Entry) Priority() int    { return e.o.priority }
func (e Entry) MaxAttempts() int { return e.o.maxAttempts }

// Meta is a copy of the entry's metadata (nil: none).
func (e Entry) Meta() Meta { return maps.Clone(e.o.meta) }

// Entry prepares one job of this kind for a mixed-kind EnqueueBatch. The
// payload and options are checked now; a refusal is reported by
// EnqueueBatch, with the entry's position.
func (k *Kind[T]) Entry(payload T, opts ...EnqueueOption) Entry {
	o, raw, plain, err := k.prepare(payload, opts)
	return Entry{kind: k.name, version: k.version, raw: raw, plain: plain, o: o, hooks: k.hooks, err: err}
}

// BatchResult tells what a batch enqueue did.
type BatchResult struct {
	// Inserted counts the jobs inserted.
	Inserted int
	// Duplicates counts the jobs not inserted because a job (or an earlier
	// job of the batch) held their unique key: kept or replaced.
	Duplicates int
	// Replaced counts those of the Duplicates whose waiting holder took
	// their payload (ReplaceWaiting, Debounce).
	Replaced int
	// Results has one entry per job of the batch, in its order: the new
	// job's id, or for a duplicate the id of the job holding its key.
	Results []Result
}

// EnqueueMany inserts a batch of jobs of this kind. opts apply to every
// item; an item's own Options override them. See EnqueueBatch for how the
// batch is sent and what the result holds.
func (k *Kind[T]) EnqueueMany(ctx context.Context, dbtx DBTX, items []Item[T], opts ...EnqueueOption) (BatchResult, error) {
	entries := make([]Entry, len(items))
	// Items without options of their own share the call's, checked once.
	shared, sharedErr := k.options(opts)
	for i, item := range items {
		o, err := shared, sharedErr
		if len(item.Options) > 0 {
			o, err = k.options(append(opts[:len(opts):len(opts)], item.Options...))
		}
		var raw, plain json.RawMessage
		if err == nil {
			raw, plain, err = k.derive(item.Payload, &o)
		}
		entries[i] = Entry{kind: k.name, version: k.version, raw: raw, plain: plain, o: o, hooks: k.hooks, err: err}
	}
	res, err := enqueueEntries(ctx, dbtx, entries, false)
	if err != nil {
		return BatchResult{}, fmt.Errorf("enqueue many %s: %w", k.name, err)
	}
	return res, nil
}

// EnqueueBatch inserts jobs of any kinds (made with Kind.Entry) together.
//
// Every entry is checked before anything is written: one bad entry fails
// the whole batch, and the error names its position. The batch is all or
// nothing, and given a transaction it commits or rolls back with it;
// workers get one wake-up per queue for the whole batch.
//
// How it is sent, in round trips: a batch without unique keys of up to 256
// jobs is a single INSERT, one round trip, as Enqueue is. A larger one is
// one statement that reserves its ids, then COPY (one COPY for jobs ready
// now, another for delayed ones; a batch with both runs the two in a
// transaction, or a savepoint of yours, so two more round trips for BEGIN
// and COMMIT). A batch where any entry has a unique key is a single INSERT
// … ON CONFLICT DO NOTHING, one round trip, whatever its size.
//
// Which clock sets run_at: a batch without unique keys, of any size,
// computes a delayed job's run_at (Delay, or RunAt) with this process's
// clock, and a ready job gets the database's now(); a batch with unique
// keys computes every run_at with the database's clock, like Enqueue.
//
// A batch with jobs of sequences (Sequence, SequenceBy) and no unique key
// takes its sequence keys' locks, then inserts every job with one INSERT,
// whatever its size, in a transaction (a savepoint inside yours): four
// round trips on a pool. With unique keys too, it goes as the paragraph
// below says, the sequence keys' locks taken with the unique keys'.
//
// A batch in which some job's key is held by more than live jobs
// (UniqueStates, UniquePeriod, ReplaceWaiting, Debounce) is sent as one
// lock on all its keys, then one statement for the jobs' first use of
// their keys, another for the second uses of keys repeated in the batch,
// and so on, pipelined in one round trip (in a transaction begun on dbtx
// when it cannot send pgx batches): each job's result is what enqueueing
// the jobs one by one would give, whatever the batch's size.
func EnqueueBatch(ctx context.Context, dbtx DBTX, entries []Entry) (BatchResult, error) {
	res, err := enqueueEntries(ctx, dbtx, entries, true)
	if err != nil {
		return BatchResult{}, fmt.Errorf("enqueue batch: %w", err)
	}
	return res, nil
}

// enqueueEntries checks and sends a batch; mixed says that its entries may
// be of several kinds, so that a refusal names the entry's kind.
func enqueueEntries(ctx context.Context, dbtx DBTX, entries []Entry, mixed bool) (BatchResult, error) {
	if len(entries) == 0 {
		return BatchResult{Results: []Result{}}, nil
	}
	// Before the hooks, which may write: nothing is written on a schema
	// older than this build.
	if err := migrated.Ensure(ctx, dbtx); err != nil {
		return BatchResult{}, err
	}
	unique, locked, sequenced, cloned := false, false, false, false
	for i, e := range entries {
		if e.kind == "" {
			return BatchResult{}, fmt.Errorf("item %d: %w: an empty Entry (make entries with Kind.Entry)", i, ErrInvalidDefinition)
		}
		if e.err != nil && mixed {
			return BatchResult{}, fmt.Errorf("item %d (%s): %w", i, e.kind, e.err)
		}
		if e.err != nil {
			return BatchResult{}, fmt.Errorf("item %d: %w", i, e.err)
		}
		if hooked(e.hooks) {
			if !cloned { // the hooks change options: never in the caller's slice
				entries, cloned = slices.Clone(entries), true
			}
			if err := runHooks(ctx, dbtx, e.kind, e.version, e.plain, e.hooks, &entries[i].o); err != nil {
				return BatchResult{}, fmt.Errorf("item %d (%s): %w", i, e.kind, err)
			}
		}
		unique = unique || entries[i].o.uniqueKey != nil
		locked = locked || entries[i].o.lockedUnique()
		sequenced = sequenced || entries[i].o.sequence != nil
	}
	// Hopper's own statements from here on: an error that names a missing
	// table or column means a schema older than this build.
	var res BatchResult
	var err error
	switch {
	case locked, sequenced && unique:
		res, err = insertLocked(ctx, dbtx, entries)
	case sequenced:
		res, err = insertSequenced(ctx, dbtx, entries)
	case unique:
		res, err = insertUnique(ctx, dbtx, entries)
	case len(entries) <= maxInsertBatch:
		res, err = insertPlain(ctx, dbtx, entries)
	default:
		res, err = copyPlain(ctx, dbtx, entries)
	}
	return res, migrated.Explain(err, dbtx)
}

// insertLocked sends a batch in which some job's unique key is held by more
// than live jobs (UniqueStates, UniquePeriod, ReplaceWaiting, Debounce), or
// some job is in a sequence (whose key's lock it takes too):
// every job of the batch through EnqueueUniqueBatch, one statement per
// round of distinct keys, after one lock on all its keys, in one pipelined
// batch (lockedEnqueue). Each job's answer is what enqueueing them one by
// one would give.
func insertLocked(ctx context.Context, dbtx DBTX, entries []Entry) (BatchResult, error) {
	params := make([]db.EnqueueUniqueParams, len(entries))
	sequences := make([]string, len(entries))
	for i := range entries {
		params[i] = uniqueParams(entries[i].kind, entries[i].version, entries[i].raw, &entries[i].o)
		sequences[i] = entries[i].o.sequenceKey()
	}
	results, err := lockedEnqueue(ctx, dbtx, params, sequences)
	if err != nil {
		return BatchResult{}, err
	}
	res := BatchResult{Results: results}
	for _, r := range results {
		switch {
		case !r.Duplicate:
			res.Inserted++
		case r.Replaced:
			res.Duplicates++
			res.Replaced++
		default:
			res.Duplicates++
		}
	}
	return res, nil
}

// insertUnique sends a batch with unique keys as one INSERT … ON CONFLICT
// DO NOTHING that reports every entry.
func insertUnique(ctx context.Context, dbtx DBTX, entries []Entry) (BatchResult, error) {
	p := db.EnqueueBatchUniqueParams{}
	for _, e := range entries {
		key := ""
		if e.o.uniqueKey != nil {
			key = *e.o.uniqueKey
		}
		p.Queues = append(p.Queues, e.o.queue)
		p.Kinds = append(p.Kinds, e.kind)
		p.Versions = append(p.Versions, int32(e.version))
		p.Payloads = append(p.Payloads, e.raw)
		p.Priorities = append(p.Priorities, int16(e.o.priority))
		p.RunAts = append(p.RunAts, e.o.runAtOrLongAgo())
		p.DelaysMs = append(p.DelaysMs, e.o.delay.Milliseconds())
		p.MaxAttempts = append(p.MaxAttempts, int32(e.o.maxAttempts))
		p.UniqueKeys = append(p.UniqueKeys, key)
		p.Metas = append(p.Metas, e.o.metaRaw)
		p.ConcurrencyKeys = append(p.ConcurrencyKeys, e.ConcurrencyKey())
	}
	rows, err := db.New(dbtx).EnqueueBatchUnique(ctx, p)
	if err != nil {
		return BatchResult{}, err
	}
	if len(rows) != len(entries) {
		return BatchResult{}, fmt.Errorf("the batch statement answered %d rows for %d jobs", len(rows), len(entries))
	}
	res := BatchResult{Results: make([]Result, len(rows))}
	for i, r := range rows {
		res.Results[i] = Result{ID: r.ID, Duplicate: !r.Inserted}
		if r.Inserted {
			res.Inserted++
		} else {
			res.Duplicates++
		}
	}
	return res, nil
}

// maxInsertBatch is the largest plain batch sent as one INSERT (one round
// trip) rather than with COPY under reserved ids (two round trips, four when
// ready and delayed jobs are mixed). A one-job batch is the common case of a
// producer that enqueues through the batch API: it should cost what Enqueue
// costs. Up to a few hundred jobs the INSERT costs no more than COPY even
// on a local server, where a round trip is cheapest; well beyond, COPY's
// cheaper rows win (BenchmarkEnqueueMany compares 256 jobs with 257). The
// EnqueueBatch comment and docs/jobs.md name this figure.
const maxInsertBatch = 256

// insertPlain sends a small batch without unique keys as one INSERT, which
// stores exactly what copyPlain would: a ready job's run_at is the
// database's now(), a delayed one's is computed by this process's clock.
func insertPlain(ctx context.Context, dbtx DBTX, entries []Entry) (BatchResult, error) {
	n := len(entries)
	p := db.EnqueueBatchPlainParams{
		Queues: make([]string, n), Kinds: make([]string, n), Versions: make([]int32, n),
		Payloads: make([]json.RawMessage, n), Priorities: make([]int16, n), RunAts: make([]time.Time, n),
		States: make([]string, n), MaxAttempts: make([]int32, n), Metas: make([]json.RawMessage, n),
		ConcurrencyKeys: make([]string, n),
	}
	clock := time.Now()
	for i, e := range entries {
		p.Queues[i], p.Kinds[i], p.Versions[i], p.Payloads[i] = e.o.queue, e.kind, int32(e.version), e.raw
		p.Priorities[i], p.MaxAttempts[i], p.Metas[i] = int16(e.o.priority), int32(e.o.maxAttempts), e.o.metaRaw
		p.ConcurrencyKeys[i] = e.ConcurrencyKey()
		p.RunAts[i], p.States[i] = e.o.batchRunAt(clock) // "" and a zero time: ready now
		if e.o.waiting {                                 // a workflow step with parents: it waits, until its run_at once they end
			p.States[i] = "waiting"
		}
	}
	ids, err := db.New(dbtx).EnqueueBatchPlain(ctx, p)
	if err != nil {
		return BatchResult{}, err
	}
	if len(ids) != n {
		return BatchResult{}, fmt.Errorf("the batch statement answered %d rows for %d jobs", len(ids), n)
	}
	res := BatchResult{Inserted: n, Results: make([]Result, n)}
	for i, id := range ids {
		res.Results[i] = Result{ID: id}
	}
	return res, nil
}

// plainRunAt is a plain batch job's run_at and state by this process's
// clock, or a zero time and "" for a job ready now, whose run_at is the
// database's now().
func (o *enqueueOptions) plainRunAt(clock time.Time) (time.Time, string) {
	if o.runAt.IsZero() && o.delay == 0 {
		return time.Time{}, ""
	}
	at := clock.Add(o.delay)
	if o.runAt.After(at) {
		at = o.runAt
	}
	if at.After(clock) {
		return at, string(StateScheduled) // kept out of the ready index until due
	}
	return at, string(StatePending)
}

// batchRunAt is plainRunAt, but for a job of a sequence, which is stored
// waiting (its commit places it): a job due now keeps the zero time, which
// EnqueueBatchPlain stores as the database's now(). (This process's clock
// could be ahead of the database's, which would make the job scheduled,
// not pending, when its turn comes.)
func (o *enqueueOptions) batchRunAt(clock time.Time) (time.Time, string) {
	at, state := o.plainRunAt(clock)
	if o.sequence == nil {
		return at, state
	}
	if state == "" {
		at = time.Time{} // EnqueueBatchPlain stores the database's now()
	}
	return at, string(StateWaiting)
}

// insertSequenced sends a batch with jobs of sequences and no unique key
// by one plain INSERT (EnqueueBatchPlain, whatever the batch's size), its
// sequence jobs stored waiting, after the lock of every sequence key of
// the batch (in one hash order, as LockEnqueueKeys takes them), all in one
// transaction (a savepoint inside the caller's): BEGIN, the lock, the
// jobs, COMMIT. The locks are held until the caller's transaction ends.
func insertSequenced(ctx context.Context, dbtx DBTX, entries []Entry) (BatchResult, error) {
	keys := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.o.sequence != nil {
			keys = append(keys, *e.o.sequence)
		}
	}
	var res BatchResult
	err := inTxOn(ctx, dbtx, func(tx DBTX) error {
		if err := db.New(tx).LockEnqueueKeys(ctx, db.LockEnqueueKeysParams{UniqueKeys: []string{}, SequenceKeys: keys}); err != nil {
			return err
		}
		var err error
		res, err = insertPlain(ctx, tx, entries)
		return err
	})
	return res, err
}

// copyPlain sends a batch without unique keys with COPY, under ids
// reserved first so that the result names every job.
func copyPlain(ctx context.Context, dbtx DBTX, entries []Entry) (BatchResult, error) {
	ids, err := db.New(dbtx).ReserveJobIDs(ctx, int32(len(entries)))
	if err != nil {
		return BatchResult{}, err
	}
	if len(ids) != len(entries) {
		return BatchResult{}, fmt.Errorf("reserved %d ids for %d jobs", len(ids), len(entries))
	}
	// Jobs ready now take the database's now() as run_at; scheduled ones
	// need the column, so they go in a second COPY.
	var now []db.EnqueueBatchParams
	var later []db.EnqueueBatchAtParams
	clock := time.Now()
	res := BatchResult{Inserted: len(entries), Results: make([]Result, len(entries))}
	for i, e := range entries {
		res.Results[i] = Result{ID: ids[i]}
		at, state := e.o.plainRunAt(clock)
		if state == "" {
			now = append(now, db.EnqueueBatchParams{
				ID: ids[i], Queue: e.o.queue, Kind: e.kind, Version: int32(e.version), Payload: e.raw,
				Priority: int16(e.o.priority), MaxAttempts: int32(e.o.maxAttempts), Meta: e.o.metaRaw, ConcurrencyKey: e.o.key,
			})
			continue
		}
		later = append(later, db.EnqueueBatchAtParams{
			ID: ids[i], Queue: e.o.queue, Kind: e.kind, Version: int32(e.version), Payload: e.raw,
			Priority: int16(e.o.priority), RunAt: at, State: state, MaxAttempts: int32(e.o.maxAttempts),
			Meta: e.o.metaRaw, ConcurrencyKey: e.o.key,
		})
	}
	copyAll := func(q *db.Queries) error {
		if len(now) > 0 {
			if _, err := q.EnqueueBatch(ctx, now); err != nil {
				return err
			}
		}
		if len(later) > 0 {
			if _, err := q.EnqueueBatchAt(ctx, later); err != nil {
				return err
			}
		}
		return nil
	}
	if len(now) > 0 && len(later) > 0 {
		// Two statements: run them in a transaction (a savepoint inside
		// the caller's) so the batch is never half-written.
		err = inTx(ctx, dbtx, copyAll)
	} else {
		err = copyAll(db.New(dbtx))
	}
	if err != nil {
		return BatchResult{}, err
	}
	return res, nil
}

// inTx runs fn in a transaction begun on dbtx (a savepoint when dbtx is
// already a transaction).
func inTx(ctx context.Context, dbtx DBTX, fn func(*db.Queries) error) error {
	return inTxOn(ctx, dbtx, func(tx DBTX) error { return fn(db.New(tx)) })
}

// inTxOn is inTx for a function that takes the transaction itself.
func inTxOn(ctx context.Context, dbtx DBTX, fn func(DBTX) error) error {
	beginner, ok := dbtx.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return fmt.Errorf("%T cannot begin a transaction: pass a pool, a connection or a transaction", dbtx)
	}
	tx, err := beginner.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
