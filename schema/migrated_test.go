package schema_test

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/migrated"
	"github.com/hopperq/hopper/schema"
)

// TestMigratedKnowsEveryMigration: internal/migrated, which says at every
// entry point which schema version this build needs and which migrations
// a schema lacks (without importing this package), knows the same
// migrations as the files here. A new migration fails this test until
// migrated.Latest and its names list it.
func TestMigratedKnowsEveryMigration(t *testing.T) {
	require.Equal(t, schema.Latest(), uint(migrated.Latest), "internal/migrated's Latest")
	require.Equal(t, schema.MigrationsTable, migrated.MigrationsTable)
	names := migrated.Names()
	require.Len(t, names, len(schema.Versions()), "internal/migrated's names")
	for i, v := range schema.Versions() {
		require.Equal(t, uint(i+1), v, "versions run 1, 2, 3, … without a gap")
		file := fmt.Sprintf("%06d_%s.up.sql", v, names[i])
		_, err := fs.Stat(schema.Files, file)
		require.NoError(t, err, "internal/migrated names migration %d %q: no file %s", v, names[i], file)
	}
	require.Equal(t, "7 (flow_record)", migrated.Migration(7))
	require.True(t, strings.HasPrefix(migrated.ErrNotMigrated.Error(), "hopper: "))
}
