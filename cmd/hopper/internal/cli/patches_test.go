package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
)

// TestPatchAdvice: what a patch still needs, from the runs that may take
// the old path and those that hold the marker.
func TestPatchAdvice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		use  hopper.PatchUse
		says string
	}{
		{hopper.PatchUse{Kind: "checkout", Patch: "cents", Marked: 3, Unmarked: 1},
			"patch cents of checkout: marked 3 live jobs; unmarked (durable records without the marker) 1 live job; keep worker.Patched"},
		{hopper.PatchUse{Kind: "checkout", Patch: "cents", Marked: 1},
			"replace worker.Patched with worker.DeprecatePatch, and keep it while a job holds the marker"},
		{hopper.PatchUse{Kind: "checkout", Patch: "in cents"},
			`patch "in cents" of checkout: marked 0 live jobs; unmarked (durable records without the marker) 0 live jobs; no live job needs it`},
	} {
		require.Contains(t, patchAdvice(tc.use), tc.says)
	}
}
