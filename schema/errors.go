package schema

import (
	"errors"

	"github.com/hopperq/hopper/internal/grants"
)

// The migrator's errors, to match with errors.Is.

// ErrDirty is returned when an earlier migration failed half-way and left
// the migrations table marked dirty. Repair the schema by hand, then call
// Force with the version the schema is really at.
var ErrDirty = errors.New("hopper: schema migrations table is dirty")

// ErrNoSchema is returned when the schema to migrate does not exist: the
// one the Name option names, or, without it, every schema the connection's
// search_path names. The error says which and how to create it.
var ErrNoSchema = errors.New("hopper: no schema to migrate")

// ErrUnknownVersion is returned by Force for a version that is not one of
// Versions (nor 0, no migration applied), and by Up and Down when the
// database records a version this build of Hopper does not carry.
var ErrUnknownVersion = errors.New("hopper: unknown schema version")

// ErrDownTooFar is returned by Down when asked to undo more migrations than
// are applied, nothing being applied included. Nothing is undone.
var ErrDownTooFar = errors.New("hopper: cannot undo that many migrations")

// ErrNoAccess is returned by Check when the role may not read the schema's
// migrations table, so the version cannot be known. The error names the
// GRANT that fixes it.
var ErrNoAccess = errors.New("hopper: cannot read the schema version")

// ErrLockTimeout is returned when every attempt of a migration waited
// lock_timeout for a lock (LockTimeout), or was ended by PostgreSQL to
// break a deadlock, and rolled back: a transaction holds a lock the
// migration needs for longer than the attempts last. Nothing is left
// half-applied.
var ErrLockTimeout = errors.New("hopper: migration timed out waiting for a lock")

// ErrMissingGrants is returned by Check, given the Grants option, when
// the session's role lacks a privilege that kind of role needs on the
// schema. The error names the GRANT statements that give it, to run as
// the schema's owner (or hopper grants ROLE --as KIND --apply). It is
// worker.ErrMissingGrants, which a worker's Run returns at its start.
var ErrMissingGrants = grants.ErrMissing

// ErrThroughPooler is returned when the migrator's sessions reach
// PostgreSQL through a pooler, such as PgBouncer, that refuses the startup
// parameters they carry (lock_timeout, and search_path with Name): the
// migrations need a direct connection to PostgreSQL. Nothing is migrated.
var ErrThroughPooler = errors.New("hopper: migrations need a direct connection to PostgreSQL, not a pooler")
