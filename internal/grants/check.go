package grants

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hopperq/hopper/db"
)

// ErrMissing is schema.ErrMissingGrants and worker.ErrMissingGrants: the
// role lacks a privilege its kind of role needs on Hopper's schema.
var ErrMissing = errors.New("hopper: missing grants")

// Check returns an error wrapping ErrMissing, naming the statements that
// give what is missing, when the role of q's session lacks a privilege
// role's list gives on schema schemaName: the statements needed Always,
// and those of the needs given. It revokes nothing and checks no REVOKE:
// more privileges than the list gives are the administrator's call.
func Check(ctx context.Context, q *db.Queries, schemaName string, role Role, needs ...Need) error {
	stmts, ok := lists[role]
	if !ok {
		return fmt.Errorf("check grants: unknown kind of role %q", role)
	}
	var wanted []Statement
	var p db.MissingGrantsParams
	p.SchemaName = schemaName
	p.ExceptFunctions = []string{}
	for _, s := range stmts {
		if s.On == onFunction {
			p.ExceptFunctions = append(p.ExceptFunctions, s.Objects...)
		}
		if s.Revoke || s.Need != Always && !slices.Contains(needs, s.Need) {
			continue
		}
		wanted = append(wanted, s)
		for _, priv := range s.Privileges {
			objects := s.Objects
			if len(objects) == 0 {
				objects = []string{""}
			}
			for _, o := range objects {
				p.Kinds = append(p.Kinds, string(s.On))
				p.Objects = append(p.Objects, o)
				p.Privileges = append(p.Privileges, priv)
			}
		}
	}
	missing, err := q.MissingGrants(ctx, p)
	if err != nil {
		return fmt.Errorf("check grants: %w", err)
	}
	if len(missing) == 0 {
		return nil
	}
	fixes := remedy(wanted, missing)
	if slices.ContainsFunc(fixes, func(f Statement) bool { return f.On == onAllFunctions }) {
		// ALL FUNCTIONS grants what the list revokes after it: revoke it again.
		for _, s := range stmts {
			if s.Revoke {
				fixes = append(fixes, s)
			}
		}
	}
	var b strings.Builder
	for _, f := range fixes {
		b.WriteString(f.SQL(schemaName, missing[0].RoleName) + "; ")
	}
	return fmt.Errorf("role %s lacks privileges a %s role needs on schema %s; run as the schema's owner: %s"+
		"or hopper grants %s --as %s --schema %s --apply, which runs them all: %w",
		missing[0].RoleName, role, schemaName, b.String(), missing[0].RoleName, role, schemaName, ErrMissing)
}

// remedy is the statements that give what missing lacks: for tables and
// sequences, the privileges missing on the objects that miss them; for
// the schema and functions, the list's statement whole (a function's name
// may be overloaded, which GRANT ... ON FUNCTION name refuses, and ALL
// FUNCTIONS has no name to narrow).
func remedy(wanted []Statement, missing []db.MissingGrantsRow) []Statement {
	lacks := map[[3]string]bool{}
	for _, m := range missing {
		k := m.Kind
		if k == string(onAllFunctions) {
			m.Object = ""
		}
		lacks[[3]string{k, m.Object, m.Privilege}] = true
	}
	var out []Statement
	for _, s := range wanted {
		switch s.On {
		case onTable, onSequence:
			// Objects grouped by the privileges they lack, in the list's order.
			var groups []Statement
			for _, o := range s.Objects {
				var privs []string
				for _, priv := range s.Privileges {
					if lacks[[3]string{string(s.On), o, priv}] {
						privs = append(privs, priv)
					}
				}
				if len(privs) == 0 {
					continue
				}
				i := slices.IndexFunc(groups, func(g Statement) bool { return slices.Equal(g.Privileges, privs) })
				if i < 0 {
					groups = append(groups, Statement{Privileges: privs, On: s.On})
					i = len(groups) - 1
				}
				groups[i].Objects = append(groups[i].Objects, o)
			}
			out = append(out, groups...)
		default:
			objects := s.Objects
			if len(objects) == 0 {
				objects = []string{""}
			}
			lacking := false
			for _, o := range objects {
				for _, priv := range s.Privileges {
					lacking = lacking || lacks[[3]string{string(s.On), o, priv}]
				}
			}
			if lacking {
				out = append(out, Statement{Privileges: s.Privileges, On: s.On, Objects: s.Objects})
			}
		}
	}
	return out
}
