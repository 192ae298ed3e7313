package testdb

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWithSearchPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, want string }{
		{"", "search_path=s1"},
		{"host=127.0.0.1 user=root", "host=127.0.0.1 user=root search_path=s1"},
		{"postgres://root@127.0.0.1:5432/test", "postgres://root@127.0.0.1:5432/test?search_path=s1"},
		{"postgres://root@127.0.0.1/test?sslmode=disable", "postgres://root@127.0.0.1/test?search_path=s1&sslmode=disable"},
		{"postgres://h/test?search_path=old", "postgres://h/test?search_path=s1"},
	} {
		require.Equal(t, tc.want, WithSearchPath(tc.dsn, "s1"), tc.dsn)
	}
}

func TestNewIsolatesSchemas(t *testing.T) {
	t.Parallel()
	a, b := New(t), New(t)
	require.NotEqual(t, a.Schema, b.Schema)
	var current string
	require.NoError(t, a.Pool.QueryRow(t.Context(), "SELECT current_schema()").Scan(&current))
	require.Equal(t, a.Schema, current)
}
