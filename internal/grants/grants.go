// Package grants is the one list of the privileges each kind of role
// needs on Hopper's schema: what hopper grants prints and applies, what a
// worker checks at its start and schema.Check checks when asked, and what
// the guides' grant blocks must say (a test of internal/tools/doccheck compares
// them), so that the four cannot drift apart.
package grants

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Role is a kind of role, as hopper grants --as names it.
type Role string

// The kinds of role.
const (
	// Producer enqueues through SQL or Go: docs/sql-api.md's grants.
	Producer Role = "producer"
	// Worker runs workers, the operations, the dashboard and enqueue:
	// docs/operating.md's least-privilege grants.
	Worker Role = "worker"
	// Reader reads Hopper's tables and views only: a read-only
	// dashboard, hopper jobs list, hopper stats.
	Reader Role = "reader"
)

// Roles are the kinds of role, in the order help lists them.
var Roles = []Role{Producer, Worker, Reader}

// Need says when a role's statement is needed, beyond the list itself:
// what a worker checks at start depends on its configuration.
type Need uint8

// The needs.
const (
	// Always: every process of the role needs it.
	Always Need = iota
	// FlowControl: a worker with a flow-controlled queue (Config.FlowControl,
	// or a kind with a key limit) claims through hopper_rate_claims.
	FlowControl
	// ReadVersion: schema.Check reads the recorded version; a worker
	// reads it when it may and otherwise checks the objects it needs.
	ReadVersion
)

// on is what a statement grants on.
type on string

const (
	onSchema       on = "schema"
	onTable        on = "table" // tables and views
	onSequence     on = "sequence"
	onFunction     on = "function"  // functions by name
	onAllFunctions on = "functions" // every function of the schema
)

// Statement is one GRANT (or REVOKE) of a role's list.
type Statement struct {
	Revoke     bool
	Privileges []string
	On         on
	Objects    []string // unqualified names of the schema's objects; none for onSchema and onAllFunctions
	Why        string
	Need       Need
}

// The objects, named once.
var (
	// readWrite are the tables a worker reads and writes.
	readWrite = []string{"hopper_jobs", "hopper_dead_jobs", "hopper_queues",
		"hopper_job_history", "hopper_schedules", "hopper_schedule_versions", "hopper_workers",
		"hopper_sequence_blocks", "hopper_workflow_deps", "hopper_workflow_waits",
		"hopper_unique_periods", "hopper_job_steps", "hopper_events", "hopper_job_progress",
		"hopper_key_limits", "hopper_shared_limits"}
	// readOnly are the views and lists a worker only reads.
	readOnly = []string{"hopper_all_jobs", "hopper_history_partitions", "hopper_dead_partitions"}
	// partitionFunctions are the SECURITY DEFINER functions that create
	// and drop partitions as the schema's owner: the pruner's, PUBLIC's
	// EXECUTE taken since migration 27.
	partitionFunctions = []string{"hopper_history_partitions_ensure", "hopper_history_partitions_drop",
		"hopper_dead_partitions_ensure", "hopper_dead_partitions_drop"}
)

// MigratorOnly are the tables only the migrator, with the schema's owner
// role, reads and writes (hopper migrate status reads the builds that
// applied each migration): no kind of role's list grants them.
var MigratorOnly = []string{"hopper_migration_builds"}

const (
	migrationsTable = "hopper_schema_migrations"
	rateClaims      = "hopper_rate_claims"
	jobsIDSequence  = "hopper_jobs_id_seq"
)

// lists are the statements of each kind of role, in the order they run.
var lists = map[Role][]Statement{
	Producer: {
		{Privileges: []string{"USAGE"}, On: onSchema},
		{Privileges: []string{"SELECT", "INSERT"}, On: onTable, Objects: []string{"hopper_jobs"}, Why: "SELECT: the id back, a duplicate's holder"},
		{Privileges: []string{"USAGE"}, On: onSequence, Objects: []string{jobsIDSequence}, Why: "hopper_enqueue_many takes its ids first"},
		{Privileges: []string{"EXECUTE"}, On: onAllFunctions, Why: "PUBLIC has it, unless revoked"},
		{Revoke: true, Privileges: []string{"EXECUTE"}, On: onFunction, Objects: partitionFunctions, Why: "the workers' pruner's, not a producer's"},
		{Privileges: []string{"SELECT"}, On: onTable, Objects: []string{migrationsTable}, Why: "schema.Check reads the version", Need: ReadVersion},
	},
	Worker: {
		{Privileges: []string{"USAGE"}, On: onSchema, Why: "the schema holding Hopper's tables"},
		{Privileges: []string{"SELECT", "INSERT", "UPDATE", "DELETE"}, On: onTable, Objects: readWrite},
		{Privileges: []string{"SELECT"}, On: onTable, Objects: readOnly, Why: "the operations API, acks that keep history"},
		{Privileges: []string{"SELECT"}, On: onTable, Objects: []string{migrationsTable}, Why: "schema.Check reads the version", Need: ReadVersion},
		{Privileges: []string{"USAGE"}, On: onSequence, Objects: []string{jobsIDSequence}, Why: "batches reserve their ids"},
		{Privileges: []string{"EXECUTE"}, On: onAllFunctions, Why: "the SQL API, flow control (PUBLIC has it unless revoked)"},
		{Privileges: []string{"EXECUTE"}, On: onFunction, Objects: partitionFunctions, Why: "the pruner's partitions: not PUBLIC's"},
		{Privileges: []string{"SELECT", "INSERT", "UPDATE", "DELETE"}, On: onTable, Objects: []string{rateClaims}, Why: "flow control's claims", Need: FlowControl},
	},
	Reader: {
		{Privileges: []string{"USAGE"}, On: onSchema},
		{Privileges: []string{"SELECT"}, On: onTable, Objects: slices.Concat(readWrite, readOnly, []string{rateClaims}), Why: "every table and view, to read"},
		{Privileges: []string{"SELECT"}, On: onTable, Objects: []string{migrationsTable}, Why: "schema.Check reads the version", Need: ReadVersion},
	},
}

// Of returns role's statements, ok false for an unknown role.
func Of(role Role) (stmts []Statement, ok bool) {
	stmts, ok = lists[role]
	return slices.Clone(stmts), ok
}

// Parse returns the Role named s, or an error that lists the kinds.
func Parse(s string) (Role, error) {
	if _, ok := lists[Role(s)]; ok {
		return Role(s), nil
	}
	names := make([]string, len(Roles))
	for i, r := range Roles {
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown kind of role %q (%s)", s, strings.Join(names, ", "))
}

// objectName is what every object name of the lists matches: they are
// written above, never taken from input, and need no quoting.
var objectName = regexp.MustCompile(`^hopper_[a-z_]+$`)

// SQL is the statement in schema schemaName for role roleName.
//
// GRANT and REVOKE take no bind parameters, so this is the one place
// where Hopper builds a statement in Go. It stays safe because the only
// names from outside, the schema and the role, are quoted as identifiers
// (pgx.Identifier.Sanitize doubles any quote inside, so no value can end
// the name); the privileges, the kind of object and the object names are
// constants of this file (objectName, checked by TestStatementsAreConstant).
func (s Statement) SQL(schemaName, roleName string) string {
	schemaID := pgx.Identifier{schemaName}.Sanitize()
	var target string
	switch s.On {
	case onSchema:
		target = "SCHEMA " + schemaID
	case onAllFunctions:
		target = "ALL FUNCTIONS IN SCHEMA " + schemaID
	default:
		var b strings.Builder
		for i, o := range s.Objects {
			if !objectName.MatchString(o) {
				panic("grants: object name " + o + " is not a constant of the lists")
			}
			switch {
			case i == 0:
			case i%3 == 0:
				b.WriteString(",\n    ")
			default:
				b.WriteString(", ")
			}
			b.WriteString(schemaID + "." + o)
		}
		target = b.String()
		switch s.On {
		case onSequence:
			target = "SEQUENCE " + target
		case onFunction:
			target = "FUNCTION " + target
		}
	}
	verb, to := "GRANT", "TO"
	if s.Revoke {
		verb, to = "REVOKE", "FROM"
	}
	return verb + " " + strings.Join(s.Privileges, ", ") + " ON " + target + " " + to + " " + pgx.Identifier{roleName}.Sanitize()
}

// Script is role's statements for schemaName and roleName, each ended
// with a semicolon, after a comment that says why when there is one: what
// hopper grants prints, and what psql runs.
func Script(role Role, schemaName, roleName string) string {
	var b strings.Builder
	for _, s := range lists[role] {
		if s.Why != "" {
			b.WriteString("-- " + s.Why + "\n")
		}
		b.WriteString(s.SQL(schemaName, roleName) + ";\n")
	}
	return b.String()
}
