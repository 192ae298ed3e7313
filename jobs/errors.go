package jobs

import (
	"errors"

	"github.com/hopperq/hopper/internal/migrated"
)

// Errors a caller can match with errors.Is. Every error Hopper returns wraps
// one of these (or a database error) with what was wrong.
var (
	// ErrInvalidDefinition: a kind's definition is wrong (bad name, version
	// below 1, a gap in the upgrade chain, an option that makes no sense).
	ErrInvalidDefinition = errors.New("hopper: invalid job kind definition")
	// ErrDuplicateKind: a worker already has a handler for a kind of that
	// name.
	ErrDuplicateKind = errors.New("hopper: job kind already defined")
	// ErrInvalidQueue: empty, over-long, or not valid UTF-8.
	ErrInvalidQueue = errors.New("hopper: invalid queue name")
	// ErrInvalidPriority: outside 0 (runs first) to 9 (runs last).
	ErrInvalidPriority = errors.New("hopper: invalid priority")
	// ErrInvalidMaxAttempts: below 1.
	ErrInvalidMaxAttempts = errors.New("hopper: invalid max attempts")
	// ErrInvalidRunAt: a negative delay, or a run time in the year 9999
	// (UTC) or later.
	ErrInvalidRunAt = errors.New("hopper: invalid run time")
	// ErrInvalidUniqueKey: empty, over-long, or not valid UTF-8.
	ErrInvalidUniqueKey = errors.New("hopper: invalid unique key")
	// ErrInvalidConcurrencyKey: empty, over-long, not valid UTF-8, or a
	// KeyBy function that panicked.
	ErrInvalidConcurrencyKey = errors.New("hopper: invalid concurrency key")
	// ErrInvalidSequenceKey: an empty or over-long sequence key, text that
	// is not valid UTF-8, an unknown policy, or a SequenceBy function that
	// panicked.
	ErrInvalidSequenceKey = errors.New("hopper: invalid sequence key")
	// ErrInvalidWorkflow: a workflow that cannot be enqueued: an empty or
	// repeated step name, a parent that is no step of it, a cycle, no
	// steps or too many, a step with a unique or sequence key.
	ErrInvalidWorkflow = errors.New("hopper: invalid workflow")
	// ErrNoResult: ParentResult found no result: no parent of that name,
	// or one that failed, has not ended, is no longer kept, or returned
	// none.
	ErrNoResult = errors.New("hopper: no result")
	// ErrMarshal: the payload could not be encoded as JSON.
	ErrMarshal = errors.New("hopper: payload does not marshal to JSON")
	// ErrPayloadTooLarge: the encoded payload is over the kind's limit.
	ErrPayloadTooLarge = errors.New("hopper: payload too large")
	// ErrInvalidState: not the name of a job state (see States).
	ErrInvalidState = errors.New("hopper: invalid job state")
	// ErrUndecodable: a stored payload could not be upgraded or decoded. A
	// worker moves such a job to the dead table at once, without retries.
	ErrUndecodable = errors.New("hopper: payload cannot be decoded")
	// ErrDecrypt: an encrypted payload, step result or event payload
	// (Encrypted) could not be decrypted: its key is not in the keyring,
	// the ciphertext fails authentication (altered, or moved from another
	// kind, job or event), or there is no keyring for it. A worker moves
	// a job whose payload fails so to the dead table at once (the error
	// wraps ErrUndecodable too), and fails a durable call so for good.
	ErrDecrypt = errors.New("hopper: cannot decrypt")
	// ErrInvalidKeyring: NewKeyring was given a key of the wrong size, an
	// invalid key id, or a current key that is not among the keys.
	ErrInvalidKeyring = errors.New("hopper: invalid keyring")
)

// ErrInvalidSchema is returned by InSchema for a name PostgreSQL cannot
// have as a schema, or a database handle it cannot scope.
var ErrInvalidSchema = errors.New("hopper: invalid schema")

// ErrInvalidMeta is returned for metadata with an empty key, text that is
// not UTF-8, or over MaxMetaBytes encoded.
var ErrInvalidMeta = errors.New("hopper: invalid metadata")

// ErrIsolation is returned (wrapping the database's error) for a write
// to a job of a sequence or a workflow — an enqueue, an acknowledgement
// with AckTx, a cancel, delete, retry or purge with a Client's Tx method,
// a call of the SQL API — in a transaction that is not READ COMMITTED.
// The database refuses it: the triggers that pass those jobs' turns must
// see what other transactions committed since each statement began, and
// under REPEATABLE READ or SERIALIZABLE they would strand work. Run such
// writes in a READ COMMITTED transaction (PostgreSQL's default); plain
// jobs may be written under any level. worker.ErrIsolation is the same
// error.
var ErrIsolation = migrated.ErrIsolation

// ErrReadOnly is returned (wrapping the database's error, SQLSTATE 25006)
// for an enqueue, or any other write of Hopper's, that the server refused
// because it is read-only: the connection reached a standby, or a primary
// a failover demoted, or a transaction that is read only (BEGIN READ ONLY,
// default_transaction_read_only). Its message names the fix: a connection
// string that lists every node and sets target_session_attrs=read-write,
// so that a new session finds the primary. hopper.Client's writes return
// it too; worker.ErrReadOnly is the same error.
var ErrReadOnly = migrated.ErrReadOnly

// ErrNotMigrated is returned by every entry point that uses Hopper's
// tables (Enqueue and the other enqueue calls, hopper.Client's methods,
// worker.Run, the hopper command) when they are missing, or the schema is
// older than this build of Hopper needs. The message names what is
// missing, the schema version this build needs, and says to run `hopper
// migrate up` (or schema.Up). For a statement's error it wraps the
// database's *pgconn.PgError too.
var ErrNotMigrated = migrated.ErrNotMigrated
