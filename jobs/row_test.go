package jobs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
)

// TestRowAttempts: attempts as they count against the limit leave out
// the claims given back uncharged, whatever the metadata says.
func TestRowAttempts(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		attempt, max             int
		uncharged                string
		wantCharged, wantAllowed int
	}{
		{"never given back", 3, 25, "", 3, 25},
		{"given back once before it ran", 1, 26, "1", 0, 25},
		{"given back, then charged twice", 3, 27, "2", 1, 25},
		{"not a count", 1, 26, "many", 1, 26},
		{"negative", 1, 26, "-4", 1, 26},
		{"more than the claims made", 2, 30, "9", 0, 28},
		{"an edit lowered the limit below it", 3, 3, "3", 1, 1},
	} {
		r := jobs.Row{Attempt: tc.attempt, MaxAttempts: tc.max}
		if tc.uncharged != "" {
			r.Meta = jobs.Meta{jobs.MetaUncharged: tc.uncharged}
		}
		charged, allowed := r.Attempts()
		require.Equal(t, []int{tc.wantCharged, tc.wantAllowed}, []int{charged, allowed}, tc.name)
	}
}
