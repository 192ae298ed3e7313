package migrated_test

import (
	"testing"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
