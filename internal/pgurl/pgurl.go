// Package pgurl edits PostgreSQL connection strings.
package pgurl

import (
	"net/url"
	"strings"
)

// WithSearchPath returns dsn with search_path set to schema, in whichever
// form (URL or keyword/value) dsn is written.
func WithSearchPath(dsn, schema string) string {
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil {
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return strings.TrimSpace(dsn + " search_path=" + schema)
}

// ForLibpq drops the pgx-only search_path parameter from a URL, which
// libpq programs such as pgbench reject (pass it in PGOPTIONS instead).
func ForLibpq(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && strings.Contains(dsn, "://") {
		q := u.Query()
		q.Del("search_path")
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn
}

// WithDatabase returns dsn pointed at database name, in whichever form (URL
// or keyword/value) dsn is written.
func WithDatabase(dsn, name string) string {
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil {
			u.Path = "/" + name
			return u.String()
		}
	}
	return strings.TrimSpace(dsn + " dbname=" + name)
}
