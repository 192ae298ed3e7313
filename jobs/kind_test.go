package jobs_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
)

func identity(raw json.RawMessage) (json.RawMessage, error) { return raw, nil }

func TestDefineValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		kind    string
		opts    []jobs.DefineOption
		wantErr error
		wantMsg string
	}{
		{"plain", "ok", nil, nil, ""},
		{"odd characters are fine", `mail'; DROP TABLE x;--ünï`, nil, nil, ""},
		{"empty name", "", nil, jobs.ErrInvalidDefinition, "is empty"},
		{"long name", strings.Repeat("k", 129), nil, jobs.ErrInvalidDefinition, "over the limit of 128"},
		{"NUL in name", "a\x00b", nil, jobs.ErrInvalidDefinition, "NUL"},
		{"bad UTF-8", "a\xffb", nil, jobs.ErrInvalidDefinition, "UTF-8"},
		{"version zero", "k", []jobs.DefineOption{jobs.Version(0)}, jobs.ErrInvalidDefinition, "below 1"},
		{"gap in chain", "k", []jobs.DefineOption{jobs.Version(3), jobs.Upgrade(1, identity)}, jobs.ErrInvalidDefinition, "no upgrade from version 2 to 3"},
		{"upgrade past current", "k", []jobs.DefineOption{jobs.Version(2), jobs.Upgrade(1, identity), jobs.Upgrade(2, identity)}, jobs.ErrInvalidDefinition, "outside 1..1"},
		{"upgrade without versions", "k", []jobs.DefineOption{jobs.Upgrade(1, identity)}, jobs.ErrInvalidDefinition, "outside 1..0"},
		{"two upgrades from one version", "k", []jobs.DefineOption{jobs.Version(2), jobs.Upgrade(1, identity), jobs.Upgrade(1, identity)}, jobs.ErrInvalidDefinition, "two upgrades from version 1"},
		{"nil upgrade", "k", []jobs.DefineOption{jobs.Version(2), jobs.Upgrade(1, nil)}, jobs.ErrInvalidDefinition, "nil"},
		{"zero payload limit", "k", []jobs.DefineOption{jobs.MaxPayloadBytes(0)}, jobs.ErrInvalidDefinition, "below 1"},
		{"bad default queue", "k", []jobs.DefineOption{jobs.Defaults(jobs.Queue(""))}, jobs.ErrInvalidQueue, "defaults"},
		{"bad default priority", "k", []jobs.DefineOption{jobs.Defaults(jobs.Priority(12))}, jobs.ErrInvalidPriority, "12"},
		{"full chain", "k", []jobs.DefineOption{jobs.Version(3), jobs.Upgrade(2, identity), jobs.Upgrade(1, identity)}, nil, ""},
	} {
		k, err := jobs.Define[struct{}](tc.kind, tc.opts...)
		if tc.wantErr == nil {
			require.NoError(t, err, tc.name)
			require.Equal(t, tc.kind, k.Name())
			continue
		}
		require.ErrorIs(t, err, tc.wantErr, tc.name)
		require.Contains(t, err.Error(), tc.wantMsg, tc.name)
	}
}

func TestDefinePanicsOnInvalid(t *testing.T) {
	t.Parallel()
	require.PanicsWithError(t, `define "k": hopper: invalid job kind definition: version -1 is below 1`, func() {
		jobs.MustDefine[struct{}]("k", jobs.Version(-1))
	})
	require.Equal(t, 2, jobs.MustDefine[struct{}]("k", jobs.Version(2), jobs.Upgrade(1, identity)).Version())
}
