package jobs

import (
	"encoding/json"
	"fmt"
	"maps"
	"unicode/utf8"
)

// MaxMetaBytes bounds a job's metadata as PostgreSQL stores its text:
// every claim reads it. Every enqueue checks it; the table allows 512
// bytes more (migration 28), kept for the keys Hopper adds while the job
// lives (a durable handler's mark, WaitJob's, the count of uncharged
// claims), so that a job enqueued at the limit can still take them.
const MaxMetaBytes = 8192

// Meta is a job's metadata: string tags of your own (a tenant, a request
// id) and trace context (the tracing middleware writes W3C traceparent
// and tracestate here). Set at enqueue with Metadata or by an enqueue hook;
// handlers see it as Job.Meta; the dead table and the history keep it.
type Meta map[string]string

// Metadata adds tags to the job's metadata (a later value of a key wins).
func Metadata(tags Meta) EnqueueOption {
	return func(o *enqueueOptions) {
		merged := make(Meta, len(o.meta)+len(tags))
		maps.Copy(merged, o.meta) // never write into a map the kind's defaults share
		maps.Copy(merged, tags)
		o.meta = merged
	}
}

// encode checks m and returns its JSON (nil, stored as NULL, when empty).
func (m Meta) encode() (json.RawMessage, error) {
	if len(m) == 0 {
		return nil, nil
	}
	for k, v := range m {
		switch {
		case k == "":
			return nil, fmt.Errorf("%w: an empty key", ErrInvalidMeta)
		case !utf8.ValidString(k) || !utf8.ValidString(v) || containsNUL(k) || containsNUL(v):
			return nil, fmt.Errorf("%w: key %q: not valid UTF-8 text", ErrInvalidMeta, k)
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidMeta, err)
	}
	// The table checks the text PostgreSQL prints, which puts a space
	// after each colon and comma: up to two bytes a key more than Go's.
	if stored := len(raw) + 2*len(m); stored > MaxMetaBytes {
		return nil, fmt.Errorf("%w: %d bytes as stored, over the limit of %d", ErrInvalidMeta, stored, MaxMetaBytes)
	}
	return raw, nil
}

// ParseMeta decodes a job's stored metadata (the meta column). Values that
// are not strings (written by SQL of your own) come back as their JSON.
func ParseMeta(raw json.RawMessage) (Meta, error) {
	if len(raw) == 0 || string(raw) == "{}" || string(raw) == "null" { // most jobs have none
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	m := make(Meta, len(fields))
	for k, v := range fields {
		var s string
		if json.Unmarshal(v, &s) == nil {
			m[k] = s
		} else {
			m[k] = string(v)
		}
	}
	return m, nil
}
