package cli

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestMaskPassword: a connection string printed in a command has no
// password, in any form it may be written in, and keeps everything else.
func TestMaskPassword(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		dsn, want string
		masked    bool
	}{
		{"postgres://ann@db:5432/app?sslmode=disable", "postgres://ann@db:5432/app?sslmode=disable", false},
		{"postgres://ann:s3cr%40t@db/app", "postgres://ann:***@db/app", true},
		{"postgres://ann@db/app?password=s3cret&sslmode=disable", "postgres://ann@db/app?password=***&sslmode=disable", true},
		{"host=db user=ann", "host=db user=ann", false},
		{"host=db password=s3cret user=ann", "host=db password=*** user=ann", true},
		{`host=db password = 'it\'s secret' user=ann`, "host=db password=*** user=ann", true},
		{`password=a\ b host=db`, "password=*** host=db", true},
		// Two passwords (the last wins): both masked, or none printed.
		{"password=one host=db password=two", "password=*** host=db password=***", true},
		// A password inside another value cannot be masked for sure.
		{"host=db options='-c password=x' password=y", urlPlaceholder, true},
	} {
		got, masked := maskPassword(c.dsn)
		require.Equal(t, c.want, got, c.dsn)
		require.Equal(t, c.masked, masked, c.dsn)
		require.NotContains(t, got, "s3cr", c.dsn)
		if got != urlPlaceholder {
			_, err := pgconn.ParseConfig(got)
			require.NoError(t, err, "%s: still a connection string", c.dsn)
		}
	}
}

// TestCommandLine: the command to run next repeats the connection flags
// the user gave, and only those.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "hopper jobs list --after x", (&env{}).commandLine("jobs list --after x"))
	require.Equal(t, "hopper --schema 'my app' dead list", (&env{schema: "my app"}).commandLine("dead list"))
	require.Equal(t, "hopper --database-url 'postgres://ann:***@db/app' --schema s jobs list  # put the password back for ***",
		(&env{dbURL: "postgres://ann:pw@db/app", schema: "s"}).commandLine("jobs list"))
}
