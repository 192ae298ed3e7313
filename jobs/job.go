package jobs

import (
	"encoding/json"
	"fmt"
	"time"
)

// Job is what a handler receives: the decoded payload and the job's
// metadata, read when the job was claimed.
type Job[T any] struct {
	ID    int64
	Queue string
	Kind  string
	// Version is the payload version the job was stored with; Payload has
	// already been upgraded to the kind's current version.
	Version  int
	Priority int
	// Attempt counts claims of this job, this one included (1 on the first
	// run). A claim given back at shutdown, a snooze, or a durable
	// handler's suspension (worker.Sleep, worker.AwaitEvent) counts here
	// but is not charged against MaxAttempts, which grows by one instead:
	// a sleeping job that never failed may run at attempt 4.
	Attempt     int
	MaxAttempts int
	CreatedAt   time.Time
	RunAt       time.Time
	// Errors is the history of failed attempts, oldest first.
	Errors []AttemptError
	// Meta is the job's metadata: tags set at enqueue (Metadata, enqueue
	// hooks) and trace context.
	Meta Meta
	// ConcurrencyKey is the job's concurrency key, "" for none.
	ConcurrencyKey string
	Payload        T
}

// Decode makes the typed view of a stored job: its payload is upgraded
// through the kind's chain and decoded into T. It reads jobs of any state:
// a worker's claims, and rows from the operations API. Errors wrap
// ErrUndecodable.
func (k *Kind[T]) Decode(row Row) (*Job[T], error) {
	if row.Kind != k.name {
		return nil, fmt.Errorf("decode job %d: %w: kind %q is not %q", row.ID, ErrUndecodable, row.Kind, k.name)
	}
	payload, err := k.DecodePayload(row.Version, row.Payload)
	if err != nil {
		return nil, fmt.Errorf("decode job %d: %w", row.ID, err)
	}
	return &Job[T]{
		ID: row.ID, Queue: row.Queue, Kind: row.Kind, Version: row.Version, Priority: row.Priority,
		Attempt: row.Attempt, MaxAttempts: row.MaxAttempts, CreatedAt: row.CreatedAt, RunAt: row.RunAt,
		Errors: row.Errors, Meta: row.Meta, ConcurrencyKey: row.ConcurrencyKey, Payload: payload,
	}, nil
}

// DecodePayload upgrades a payload stored at version through the kind's
// chain to the current version, then unmarshals it into T; an encrypted
// payload (Encrypted) is decrypted first, and one that cannot be wraps
// ErrDecrypt as well. It never
// panics: a panic in an upgrade function or in T's UnmarshalJSON is
// returned as an error. Errors wrap ErrUndecodable.
func (k *Kind[T]) DecodePayload(version int, raw json.RawMessage) (payload T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: panic while decoding version %d: %v", ErrUndecodable, version, r)
		}
	}()
	if version < 1 || version > k.version {
		return payload, fmt.Errorf("%w: version %d, but this build of %q understands 1 to %d", ErrUndecodable, version, k.name, k.version)
	}
	// An encrypted payload is decrypted with the additional data of its
	// stored version; one in the clear (enqueued before the kind was
	// encrypted, or without a key) is read as it is.
	raw, err = k.keyring.open(raw, payloadContext(k.name, version))
	if err != nil {
		return payload, fmt.Errorf("%w: %w", ErrUndecodable, err)
	}
	for v := version; v < k.version; v++ {
		next, err := k.upgrades[v-1](raw)
		if err != nil {
			return payload, fmt.Errorf("%w: upgrade from version %d to %d: %v", ErrUndecodable, v, v+1, err)
		}
		raw = next
	}
	if err := json.Unmarshal(raw, &payload); err != nil {
		return payload, fmt.Errorf("%w: version %d: %v", ErrUndecodable, k.version, err)
	}
	return payload, nil
}
