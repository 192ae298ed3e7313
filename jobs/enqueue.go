package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/migrated"
)

// EnqueueOption sets how one job (or, given to Defaults, every job of a
// kind) is enqueued.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct {
	queue          string
	priority       int
	maxAttempts    int
	runAt          time.Time
	delay          time.Duration
	uniqueKey      *string
	key            *string // concurrency key
	sequence       *string // sequence key (sequence.go)
	sequencePolicy SequencePolicy
	waiting        bool // a workflow step with parents (workflow.go)
	meta           Meta
	metaRaw        json.RawMessage // meta encoded, by validate

	// Uniqueness beyond live jobs (unique.go).
	uniqueStates    []State
	uniqueStatesSet bool
	uniquePeriod    time.Duration
	replace         bool // ReplaceWaiting, Debounce
	pushRunAt       bool // Debounce
}

func defaultOptions() enqueueOptions {
	return enqueueOptions{queue: DefaultQueue, maxAttempts: DefaultMaxAttempts}
}

// Queue puts the job on the named queue (default "default").
func Queue(name string) EnqueueOption { return func(o *enqueueOptions) { o.queue = name } }

// Priority orders ready jobs within a queue: 0 (the default) runs first, 9
// last. Give bulk work a higher number rather than urgent work a lower one.
func Priority(p int) EnqueueOption { return func(o *enqueueOptions) { o.priority = p } }

// MaxAttempts is how many times the job may be claimed before it is dead
// (default 25). 1 means no retries.
func MaxAttempts(n int) EnqueueOption { return func(o *enqueueOptions) { o.maxAttempts = n } }

// RunAt makes the job ready no earlier than t. A time in the past means now;
// one in the year 9999 (UTC) or later is refused (ErrInvalidRunAt), as a
// time some time zone would read back in the year 10000, which Go's JSON
// and RFC 3339 cannot write.
func RunAt(t time.Time) EnqueueOption { return func(o *enqueueOptions) { o.runAt = t } }

// Delay makes the job ready d from now. For a single Enqueue "now" is the
// database's clock; a batch sent with COPY measures it with this process's
// clock (see EnqueueBatch).
func Delay(d time.Duration) EnqueueOption { return func(o *enqueueOptions) { o.delay = d } }

// UniqueKey makes the enqueue a no-op while a live job (pending, scheduled
// or running) holds the same key; the result says so. By default finished
// jobs free the key: UniqueStates and UniquePeriod make them hold it, and
// ReplaceWaiting and Debounce update a waiting job instead of skipping.
// A kind can derive the key from the payload (UniqueBy, UniqueFields).
func UniqueKey(key string) EnqueueOption { return func(o *enqueueOptions) { o.uniqueKey = &key } }

// ConcurrencyKey puts the job under a concurrency key: a customer, a
// tenant, an API account. Workers limit how many jobs of one key run at
// once across all processes (worker.FlowControl.KeyLimit, worker.KeyLimit),
// rate-limit per key, and share a fair queue round-robin among keys. It
// overrides the key a kind derives from its payload (KeyBy). At most
// MaxConcurrencyKeyLength characters of valid UTF-8.
func ConcurrencyKey(key string) EnqueueOption { return func(o *enqueueOptions) { o.key = &key } }

func (o *enqueueOptions) validate() error {
	if err := ValidateQueue(o.queue); err != nil {
		return err
	}
	meta, err := o.validateSequence()
	if err != nil {
		return err
	}
	raw, err := meta.encode()
	if err != nil {
		return err
	}
	o.metaRaw = raw
	if o.priority < MinPriority || o.priority > MaxPriority {
		return fmt.Errorf("%w: %d is outside %d (first) to %d (last)", ErrInvalidPriority, o.priority, MinPriority, MaxPriority)
	}
	if o.maxAttempts < 1 || o.maxAttempts > 1<<30 {
		return fmt.Errorf("%w: %d (must be 1 or more)", ErrInvalidMaxAttempts, o.maxAttempts)
	}
	if o.delay < 0 {
		return fmt.Errorf("%w: negative delay %v", ErrInvalidRunAt, o.delay)
	}
	if !o.runAt.Before(maxRunAt) {
		return fmt.Errorf("%w: run_at is in the year 9999 or later", ErrInvalidRunAt)
	}
	if err := checkKey(o.key, ErrInvalidConcurrencyKey, MaxConcurrencyKeyLength); err != nil {
		return err
	}
	if err := o.validateUnique(); err != nil {
		return err
	}
	return checkKey(o.uniqueKey, ErrInvalidUniqueKey, MaxUniqueKeyLength)
}

// checkKey applies a key's rules: none, or 1 to max characters of valid
// UTF-8 without NUL.
func checkKey(k *string, invalid error, max int) error {
	if k != nil {
		switch n := utf8.RuneCountInString(*k); {
		case *k == "":
			return fmt.Errorf("%w: empty (leave the option out for no key)", invalid)
		case n > max:
			return fmt.Errorf("%w: %d characters long, over the limit of %d", invalid, n, max)
		case !utf8.ValidString(*k) || containsNUL(*k):
			return fmt.Errorf("%w: not valid UTF-8 text", invalid)
		}
	}
	return nil
}

// longAgo stands for "now" as Enqueue's run_at: the query takes the later
// of run_at and now() + delay.
var longAgo = time.Unix(0, 0).UTC()

// maxRunAt is the first run time refused: the SQL API's bound, and that
// of the check on hopper_jobs (migration 16).
var maxRunAt = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// runAtOrLongAgo is run_at as the statements take it. Any time before
// longAgo is longAgo, which means now as well: a time hundreds of
// thousands of years back would overflow pgx's encoding (microseconds
// since 2000 in an int64) into a time far ahead.
func (o *enqueueOptions) runAtOrLongAgo() time.Time {
	if o.runAt.Before(longAgo) { // the zero time too
		return longAgo
	}
	return o.runAt
}

// Result tells what Enqueue did.
type Result struct {
	// ID is the new job's id, or, for a duplicate, the id of the job that
	// holds the unique key: live, finished (UniqueStates, UniquePeriod), or
	// the waiting job that was replaced (0 in the rare case that a live
	// holder committed while this enqueue ran and was not yet visible to
	// it).
	ID int64
	// Duplicate is true when a job held the unique key and nothing was
	// inserted: a live job, or a finished one under UniqueStates or
	// UniquePeriod (ID is then that job's).
	Duplicate bool
	// Replaced is true when the holder was a waiting job that took this
	// enqueue's payload (ReplaceWaiting, Debounce). Duplicate is true too,
	// since nothing was inserted; Outcome tells the three cases apart.
	Replaced bool
}

// prepare checks and encodes one job: stored is the payload as it is
// stored, plain its JSON in the clear (the same but for an encrypted
// kind), which enqueue hooks see.
func (k *Kind[T]) prepare(payload T, opts []EnqueueOption) (o enqueueOptions, stored, plain json.RawMessage, err error) {
	o, err = k.options(opts)
	if err != nil {
		return o, nil, nil, err
	}
	stored, plain, err = k.derive(payload, &o)
	return o, stored, plain, err
}

// derive sets what the kind derives from the payload (KeyBy, SequenceBy,
// UniqueBy, UniqueFields) on options already checked, and encodes the
// payload: every key is derived from the payload in the clear, before it
// is encrypted (Encrypted).
func (k *Kind[T]) derive(payload T, o *enqueueOptions) (stored, plain json.RawMessage, err error) {
	if err := k.deriveKey(payload, o); err != nil {
		return nil, nil, err
	}
	if err := k.deriveSequence(payload, o); err != nil {
		return nil, nil, err
	}
	plain, err = k.encode(payload)
	if err == nil {
		err = k.deriveUniqueKey(payload, plain, o)
	}
	if err != nil {
		return nil, nil, err
	}
	stored, err = k.seal(plain)
	return stored, plain, err
}

// seal encrypts an encoded payload for storage when the kind is
// Encrypted; otherwise it is stored as it is.
func (k *Kind[T]) seal(plain json.RawMessage) (json.RawMessage, error) {
	if k.keyring == nil {
		return plain, nil
	}
	stored, err := k.keyring.seal(plain, payloadContext(k.name, k.version))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMarshal, err)
	}
	return stored, nil
}

// EncodePayload is payload as a job of the kind stores it, at the kind's
// current version: its JSON, checked against MaxPayloadBytes, and
// encrypted when the kind is Encrypted. DecodePayload reads it back.
func (k *Kind[T]) EncodePayload(payload T) (json.RawMessage, error) {
	plain, err := k.encode(payload)
	if err != nil {
		return nil, err
	}
	return k.seal(plain)
}

// deriveKey sets the concurrency key from the payload (KeyBy) when no
// option gave one.
func (k *Kind[T]) deriveKey(payload T, o *enqueueOptions) error {
	if k.keyOf == nil || o.key != nil {
		return nil
	}
	key, err := k.keyOf(payload)
	if err != nil || key == "" {
		return err
	}
	o.key = &key
	return checkKey(o.key, ErrInvalidConcurrencyKey, MaxConcurrencyKeyLength)
}

// options applies opts over the kind's defaults and validates the result.
func (k *Kind[T]) options(opts []EnqueueOption) (enqueueOptions, error) {
	o := k.defaults
	for _, opt := range opts {
		opt(&o)
	}
	return o, o.validate()
}

// encode marshals a payload and applies the kind's size limit.
func (k *Kind[T]) encode(payload T) (json.RawMessage, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMarshal, err)
	}
	if len(raw) > k.maxPayloadBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, over the limit of %d", ErrPayloadTooLarge, len(raw), k.maxPayloadBytes)
	}
	return raw, nil
}

// Check validates a payload and options exactly as Enqueue would, without
// writing anything: the error wraps the same sentinels.
func (k *Kind[T]) Check(payload T, opts ...EnqueueOption) error {
	if _, _, _, err := k.prepare(payload, opts); err != nil {
		return fmt.Errorf("enqueue %s: %w", k.name, err)
	}
	return nil
}

// Enqueue inserts one job through dbtx: a *pgxpool.Pool, a *pgx.Conn, a
// pgx.Tx, or anything else with the methods sqlc's DBTX has. Given a
// transaction, the job commits or rolls back with it. One statement, one
// round trip; run_at is computed by the database's clock.
func (k *Kind[T]) Enqueue(ctx context.Context, dbtx DBTX, payload T, opts ...EnqueueOption) (Result, error) {
	o, raw, plain, err := k.prepare(payload, opts)
	if err == nil {
		err = migrated.Ensure(ctx, dbtx)
	}
	if err == nil {
		err = runHooks(ctx, dbtx, k.name, k.version, plain, k.hooks, &o)
	}
	if err != nil {
		return Result{}, fmt.Errorf("enqueue %s: %w", k.name, err)
	}
	if o.locked() {
		res, err := lockedEnqueue(ctx, dbtx, []db.EnqueueUniqueParams{uniqueParams(k.name, k.version, raw, &o)}, []string{o.sequenceKey()})
		if err != nil {
			return Result{}, fmt.Errorf("enqueue %s: %w", k.name, migrated.Explain(err, dbtx))
		}
		return res[0], nil
	}
	row, err := db.New(dbtx).Enqueue(ctx, db.EnqueueParams{
		Queue:          o.queue,
		Kind:           k.name,
		Version:        int32(k.version),
		Payload:        raw,
		Priority:       int16(o.priority),
		RunAt:          o.runAtOrLongAgo(),
		DelayMs:        o.delay.Milliseconds(),
		MaxAttempts:    int32(o.maxAttempts),
		UniqueKey:      o.uniqueKey,
		Meta:           o.metaRaw,
		ConcurrencyKey: o.key,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Result{Duplicate: true}, nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("enqueue %s: %w", k.name, migrated.Explain(err, dbtx))
	}
	return Result{ID: row.ID, Duplicate: !row.Inserted}, nil
}

// EnqueueRaw inserts one job of the named kind with an already encoded
// payload stored as payload version version: the path for operators and
// scripts (`hopper enqueue`) that have no Go type for the kind. It applies
// the same checks as Enqueue, plus: the kind name's rules, version >= 1,
// and payload must be valid JSON (ErrMarshal otherwise).
func EnqueueRaw(ctx context.Context, dbtx DBTX, kind string, version int, payload json.RawMessage, opts ...EnqueueOption) (Result, error) {
	if err := checkName(kind); err != nil {
		return Result{}, fmt.Errorf("enqueue: %w: kind name %q %v", ErrInvalidDefinition, kind, err)
	}
	if version < 1 || version > math.MaxInt32 {
		return Result{}, fmt.Errorf("enqueue %s: %w: version %d is outside 1 to %d", kind, ErrInvalidDefinition, version, math.MaxInt32)
	}
	if !json.Valid(payload) {
		return Result{}, fmt.Errorf("enqueue %s: %w: the payload is not valid JSON", kind, ErrMarshal)
	}
	k := &Kind[json.RawMessage]{name: kind, version: version, defaults: defaultOptions(), maxPayloadBytes: DefaultMaxPayloadBytes}
	return k.Enqueue(ctx, dbtx, payload, opts...)
}
