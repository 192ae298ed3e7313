// Package upgrade holds the suite that upgrades a busy schema while workers
// of the previous build, built from the repository's history, keep
// working, and then runs them beside this build's workers.
package upgrade

import (
	"testing"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
