package jobs

import (
	"errors"
	"fmt"
	"maps"
	"unicode/utf8"
)

// Sequences: jobs that share a sequence key run one at a time, in the
// order their enqueues committed, across every worker process. The key is
// kept in the job's metadata (MetaSequence), where every path that writes
// a job carries it; the database orders the jobs (migration 13, see
// docs/sequences.md).

// The metadata keys a sequence is stored under, for SQL of your own and
// for handlers that read Job.Meta.
const (
	// MetaSequence holds the sequence key.
	MetaSequence = "hopper.sequence"
	// MetaSequencePolicy holds the policy, when it is not the default.
	MetaSequencePolicy = "hopper.sequence_policy"
)

// MaxSequenceKeyBytes bounds a sequence key, in bytes of UTF-8.
const MaxSequenceKeyBytes = 255

// SequencePolicy says what a job of a sequence that ends dead or cancelled
// does to the jobs behind it.
type SequencePolicy string

const (
	// SequenceBlock (the default) holds the sequence: the jobs behind wait
	// until an operator retries the job (it runs again, first) or skips it
	// (the next job runs). See hopper.Client's ListBlockedSequences.
	SequenceBlock SequencePolicy = "block"
	// SequenceContinue lets the next job run, as if the job had succeeded.
	SequenceContinue SequencePolicy = "continue"
)

// Sequence puts the job in the named sequence: the jobs of one key run one
// at a time, in the order their enqueues committed (which within a key is
// also the order of their ids: an enqueue holds its keys' lock until its
// transaction ends, so a second transaction enqueueing to the key waits
// for the first). A job that fails holds the sequence through its retries;
// one that ends dead or cancelled applies its policy (SequenceOnDead).
func Sequence(key string) EnqueueOption {
	return func(o *enqueueOptions) { o.sequence = &key }
}

// SequenceOnDead sets what the job does to its sequence if it ends dead or
// cancelled: SequenceBlock (the default) or SequenceContinue. It has no
// effect on a job without a sequence.
func SequenceOnDead(p SequencePolicy) EnqueueOption {
	return func(o *enqueueOptions) { o.sequencePolicy = p }
}

// SequenceBy derives each job's sequence key from its payload (the
// account whose postings must apply in order), unless the enqueue gives
// one (Sequence). An empty key means none. T must be the kind's payload
// type.
func SequenceBy[T any](fn func(T) string) DefineOption {
	return func(d *definition) {
		if fn == nil {
			d.errs = append(d.errs, errors.New("SequenceBy: nil function"))
			return
		}
		d.sequenceOf = fn
	}
}

// validateSequence checks the sequence and its policy, takes a sequence
// written straight into the metadata as the option (so that its enqueue
// takes the key's lock too), and returns the metadata to store.
func (o *enqueueOptions) validateSequence() (Meta, error) {
	if o.sequence == nil {
		if key, ok := o.meta[MetaSequence]; ok {
			o.sequence = &key
		}
	}
	if o.sequencePolicy == "" {
		if p, ok := o.meta[MetaSequencePolicy]; ok {
			o.sequencePolicy = SequencePolicy(p)
		}
	}
	if o.sequence == nil {
		return o.meta, nil
	}
	switch k := *o.sequence; {
	case k == "":
		return nil, fmt.Errorf("%w: empty (leave the option out for no sequence)", ErrInvalidSequenceKey)
	case len(k) > MaxSequenceKeyBytes:
		return nil, fmt.Errorf("%w: %d bytes long, over the limit of %d", ErrInvalidSequenceKey, len(k), MaxSequenceKeyBytes)
	case !utf8.ValidString(k) || containsNUL(k):
		return nil, fmt.Errorf("%w: not valid UTF-8 text", ErrInvalidSequenceKey)
	}
	switch o.sequencePolicy {
	case "", SequenceBlock, SequenceContinue:
	default:
		return nil, fmt.Errorf("%w: unknown policy %q (SequenceBlock or SequenceContinue)", ErrInvalidSequenceKey, o.sequencePolicy)
	}
	meta := make(Meta, len(o.meta)+2)
	maps.Copy(meta, o.meta) // never write into a map the kind's defaults share
	meta[MetaSequence] = *o.sequence
	delete(meta, MetaSequencePolicy)
	if o.sequencePolicy == SequenceContinue {
		meta[MetaSequencePolicy] = string(SequenceContinue)
	}
	return meta, nil
}

// SequenceKey is the sequence key the kind's SequenceBy derives from
// payload ("" when it derives none), and whether the kind has a
// SequenceBy at all. hopper.PayloadOf uses it so that an edited payload
// never runs in another key's order: a job's key is fixed at enqueue.
func (k *Kind[T]) SequenceKey(payload T) (key string, derived bool, err error) {
	if k.sequenceOf == nil {
		return "", false, nil
	}
	key, err = k.sequenceOf(payload)
	return key, true, err
}

// deriveSequence sets the sequence key from the payload (SequenceBy) when
// no option gave one, and stores it in the metadata.
func (k *Kind[T]) deriveSequence(payload T, o *enqueueOptions) error {
	if k.sequenceOf == nil || o.sequence != nil {
		return nil
	}
	key, err := k.sequenceOf(payload)
	if err != nil || key == "" {
		return err
	}
	o.sequence = &key
	return o.validate()
}

// sequenceKey is the job's sequence key, "" for none.
func (o *enqueueOptions) sequenceKey() string {
	if o.sequence == nil {
		return ""
	}
	return *o.sequence
}
