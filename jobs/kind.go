package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// Limits on names and keys, the same as the CHECK constraints in schema/.
const (
	MaxNameLength      = 128
	MaxUniqueKeyLength = 512
	// MaxConcurrencyKeyLength bounds a concurrency key, in characters.
	MaxConcurrencyKeyLength = 255
	MinPriority             = 0
	MaxPriority             = 9
	// DefaultMaxPayloadBytes is the encoded payload size a kind accepts
	// unless it sets MaxPayloadBytes.
	DefaultMaxPayloadBytes = 1 << 20
	// DefaultQueue is where jobs go unless told otherwise.
	DefaultQueue = "default"
	// DefaultMaxAttempts is how many claims a job gets unless told otherwise.
	DefaultMaxAttempts = 25
)

// UpgradeFunc turns a payload of one version into the next version's JSON.
type UpgradeFunc func(json.RawMessage) (json.RawMessage, error)

// Kind is a job kind with payloads of type T. Define one per kind, once, at
// package level; it is safe for concurrent use.
type Kind[T any] struct {
	name            string
	version         int
	upgrades        []UpgradeFunc // upgrades[v-1] turns version v into v+1
	defaults        enqueueOptions
	maxPayloadBytes int
	hooks           []EnqueueHook           // OnEnqueue's
	keyOf           func(T) (string, error) // KeyBy's
	uniqueOf        func(T) (string, error) // UniqueBy's
	uniqueFields    []string                // UniqueFields'
	sequenceOf      func(T) (string, error) // SequenceBy's
	keyring         *Keyring                // Encrypted's; nil: in the clear
}

// Name is the kind's stable name, stored with every job.
func (k *Kind[T]) Name() string { return k.name }

// Version is the kind's current payload version: new jobs are stored with
// it, and older payloads are upgraded to it before decoding.
func (k *Kind[T]) Version() int { return k.version }

// Keyring is the kind's keyring (Encrypted), nil when its payloads are
// stored in the clear.
func (k *Kind[T]) Keyring() *Keyring { return k.keyring }

// DefineOption configures a kind.
type DefineOption func(*definition)

type definition struct {
	version         int
	upgrades        map[int]UpgradeFunc
	defaults        []EnqueueOption
	maxPayloadBytes int
	hooks           []EnqueueHook
	keyOf           any // KeyBy's func(T) string
	uniqueOf        any // UniqueBy's func(T) string
	uniqueFields    []string
	sequenceOf      any // SequenceBy's func(T) string
	keyring         *Keyring
	errs            []error
}

// Version sets the kind's current payload version (default 1). Every
// version below it needs an Upgrade.
func Version(v int) DefineOption {
	return func(d *definition) { d.version = v }
}

// Upgrade registers how a payload of version from becomes version from+1.
// Write it against the JSON as it was stored; Convert builds one from typed
// old and new structs.
func Upgrade(from int, fn UpgradeFunc) DefineOption {
	return func(d *definition) {
		switch {
		case fn == nil:
			d.errs = append(d.errs, fmt.Errorf("upgrade from version %d is nil", from))
		case d.upgrades[from] != nil:
			d.errs = append(d.errs, fmt.Errorf("two upgrades from version %d", from))
		default:
			d.upgrades[from] = fn
		}
	}
}

// Convert adapts a typed upgrade, from the old payload struct to the next
// version's, into an UpgradeFunc.
func Convert[From, To any](fn func(From) (To, error)) UpgradeFunc {
	return func(raw json.RawMessage) (json.RawMessage, error) {
		var old From
		if err := json.Unmarshal(raw, &old); err != nil {
			return nil, err
		}
		next, err := fn(old)
		if err != nil {
			return nil, err
		}
		return json.Marshal(next)
	}
}

// Defaults sets enqueue options that apply to every job of the kind unless
// the Enqueue call overrides them (for example Queue("email")).
func Defaults(opts ...EnqueueOption) DefineOption {
	return func(d *definition) { d.defaults = append(d.defaults, opts...) }
}

// MaxPayloadBytes caps the encoded payload size (default 1 MiB).
func MaxPayloadBytes(n int) DefineOption {
	return func(d *definition) { d.maxPayloadBytes = n }
}

// KeyBy derives each job's concurrency key from its payload (for example
// the customer it is for), unless the enqueue gives one (ConcurrencyKey).
// An empty key means none. T must be the kind's payload type.
func KeyBy[T any](fn func(T) string) DefineOption {
	return func(d *definition) {
		if fn == nil {
			d.errs = append(d.errs, errors.New("KeyBy: nil function"))
			return
		}
		d.keyOf = fn
	}
}

// MustDefine is Define that panics if the definition is invalid: kinds are
// declared once at package level, where a mistake should stop the program
// at start.
//
// A name may be defined more than once in a process (a test can hold two
// deploys' versions of one kind); a worker rejects two handlers for one
// name with ErrDuplicateKind.
func MustDefine[T any](name string, opts ...DefineOption) *Kind[T] {
	k, err := Define[T](name, opts...)
	if err != nil {
		panic(err)
	}
	return k
}

// Define declares a kind, or returns why it cannot: ErrInvalidDefinition,
// or the error of an invalid default option.
func Define[T any](name string, opts ...DefineOption) (*Kind[T], error) {
	d := definition{version: 1, upgrades: map[int]UpgradeFunc{}, maxPayloadBytes: DefaultMaxPayloadBytes}
	for _, opt := range opts {
		opt(&d)
	}
	fail := func(format string, args ...any) (*Kind[T], error) {
		return nil, fmt.Errorf("define %q: %w: %s", name, ErrInvalidDefinition, fmt.Sprintf(format, args...))
	}
	if err := checkName(name); err != nil {
		return fail("kind name %v", err)
	}
	if len(d.errs) > 0 {
		return fail("%v", d.errs[0])
	}
	if d.version < 1 {
		return fail("version %d is below 1", d.version)
	}
	if d.version > math.MaxInt32 {
		return fail("version %d is over %d", d.version, math.MaxInt32)
	}
	if d.maxPayloadBytes < 1 {
		return fail("max payload bytes %d is below 1", d.maxPayloadBytes)
	}
	k := &Kind[T]{name: name, version: d.version, maxPayloadBytes: d.maxPayloadBytes, hooks: d.hooks, uniqueFields: d.uniqueFields, keyring: d.keyring}
	if d.uniqueOf != nil {
		fn, ok := d.uniqueOf.(func(T) string)
		if !ok {
			var zero T
			return fail("UniqueBy takes a func(%T) string for this kind, not %T", zero, d.uniqueOf)
		}
		k.uniqueOf = func(payload T) (key string, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("%w: UniqueBy panicked: %v", ErrInvalidUniqueKey, p)
				}
			}()
			return fn(payload), nil
		}
	}
	if d.keyOf != nil {
		fn, ok := d.keyOf.(func(T) string)
		if !ok {
			var zero T
			return fail("KeyBy takes a func(%T) string for this kind, not %T", zero, d.keyOf)
		}
		k.keyOf = func(payload T) (key string, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("%w: KeyBy panicked: %v", ErrInvalidConcurrencyKey, p)
				}
			}()
			return fn(payload), nil
		}
	}
	if d.sequenceOf != nil {
		fn, ok := d.sequenceOf.(func(T) string)
		if !ok {
			var zero T
			return fail("SequenceBy takes a func(%T) string for this kind, not %T", zero, d.sequenceOf)
		}
		k.sequenceOf = func(payload T) (key string, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("%w: SequenceBy panicked: %v", ErrInvalidSequenceKey, p)
				}
			}()
			return fn(payload), nil
		}
	}
	for v := 1; v < d.version; v++ {
		fn := d.upgrades[v]
		if fn == nil {
			return fail("no upgrade from version %d to %d: the chain must run from 1 to %d", v, v+1, d.version)
		}
		k.upgrades = append(k.upgrades, fn)
	}
	var extra []int
	for v := range d.upgrades {
		if v < 1 || v >= d.version {
			extra = append(extra, v)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		return fail("upgrade from version %d is outside 1..%d", extra[0], d.version-1)
	}
	k.defaults = defaultOptions()
	for _, opt := range d.defaults {
		opt(&k.defaults)
	}
	if err := k.defaults.validate(); err != nil {
		return nil, fmt.Errorf("define %q: defaults: %w", name, err)
	}

	return k, nil
}

// ValidateQueue reports whether name can be a queue name, with an error
// wrapping ErrInvalidQueue when it cannot.
func ValidateQueue(name string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("%w: queue name %q %v", ErrInvalidQueue, name, err)
	}
	return nil
}

// checkName applies the rules shared by kind and queue names: 1 to 128
// characters of valid UTF-8 without NUL (PostgreSQL text cannot hold it).
// Any other character is fine: names are always bound, never spliced.
func checkName(name string) error {
	switch n := utf8.RuneCountInString(name); {
	case name == "":
		return fmt.Errorf("is empty")
	case n > MaxNameLength:
		return fmt.Errorf("is %d characters long, over the limit of %d", n, MaxNameLength)
	case !utf8.ValidString(name):
		return fmt.Errorf("is not valid UTF-8")
	case containsNUL(name):
		return fmt.Errorf("contains a NUL character")
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}
