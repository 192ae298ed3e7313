package jobs_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/rows"
	"github.com/hopperq/hopper/jobs"
)

var ada = Welcome{FirstName: "Ada", LastName: "Lovelace", Email: "ada@example.com", Locale: "en"}

func fixture(t testing.TB, version int) json.RawMessage {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("testdata/welcome_v%d.json", version))
	require.NoError(t, err)
	return raw
}

// TestGoldenFixtures: a payload stored by every past version decodes to the
// same current value, and the current version still encodes as its fixture
// (so a struct change that alters stored JSON needs a new version).
func TestGoldenFixtures(t *testing.T) {
	t.Parallel()
	k := defineWelcome(t, "welcome")
	for v := 1; v <= 3; v++ {
		got, err := k.DecodePayload(v, fixture(t, v))
		require.NoError(t, err, "version %d", v)
		require.Equal(t, ada, got, "version %d", v)
	}
	encoded, err := json.Marshal(ada)
	require.NoError(t, err)
	require.JSONEq(t, string(fixture(t, 3)), string(encoded))
}

func TestDecodeFailures(t *testing.T) {
	t.Parallel()
	k := defineWelcome(t, "welcome")
	panicky := jobs.MustDefine[Welcome]("welcome.panicky", jobs.Version(2),
		jobs.Upgrade(1, func(json.RawMessage) (json.RawMessage, error) { panic("upgrade bug") }))
	for _, tc := range []struct {
		name    string
		kind    *jobs.Kind[Welcome]
		version int
		raw     string
		msg     string
	}{
		{"upgrade refuses", k, 1, `{"email":"x@example.com"}`, "upgrade from version 1 to 2: v1 payload without a name"},
		{"wrong shape", k, 3, `"just a string"`, "cannot unmarshal string"},
		{"wrong shape for an old version", k, 2, `[1,2]`, "upgrade from version 2 to 3"},
		{"newer than this build", k, 4, `{}`, "version 4, but this build of \"welcome\" understands 1 to 3"},
		{"version zero", k, 0, `{}`, "version 0"},
		{"upgrade panics", panicky, 1, `{}`, "panic while decoding version 1: upgrade bug"},
	} {
		_, err := tc.kind.DecodePayload(tc.version, json.RawMessage(tc.raw))
		require.ErrorIs(t, err, jobs.ErrUndecodable, tc.name)
		require.Contains(t, err.Error(), tc.msg, tc.name)
	}
}

// TestVersionedClaims: v1 and v2 jobs in the table are both handled as v3;
// a v4 job is left alone by a v3 worker and taken by a v4 one.
func TestVersionedClaims(t *testing.T) {
	b := setup(t)
	v3 := defineWelcome(t, "welcome")
	v4 := jobs.MustDefine[Welcome]("welcome", jobs.Version(4), // the next deploy
		jobs.Upgrade(1, jobs.Convert(welcomeV1toV2)),
		jobs.Upgrade(2, jobs.Convert(welcomeV2toV3)),
		jobs.Upgrade(3, func(raw json.RawMessage) (json.RawMessage, error) { return raw, nil }),
	)
	for v := 1; v <= 4; v++ {
		raw := json.RawMessage(`{"first_name":"Ada","last_name":"Lovelace","email":"ada@example.com","locale":"en"}`)
		if v < 4 {
			raw = fixture(t, v)
		}
		_, err := b.Queries.Enqueue(b.Ctx, db.EnqueueParams{
			Queue: "default", Kind: "welcome", Version: int32(v), Payload: raw, RunAt: longAgo, MaxAttempts: 1,
		})
		require.NoError(t, err)
	}
	claim := func(k *jobs.Kind[Welcome]) []db.HopperJob {
		rows, err := b.Queries.Dequeue(b.Ctx, db.DequeueParams{
			Queue: "default", Kinds: []string{k.Name()}, MaxVersions: []int32{int32(k.Version())},
			MaxJobs: 10, Owner: "w", LeaseMs: 60_000,
		})
		require.NoError(t, err)
		return rows
	}

	old := claim(v3)
	require.Len(t, old, 3, "the v3 worker takes versions 1 to 3 only")
	for _, row := range old {
		job, err := v3.Decode(liveRow(t, row))
		require.NoError(t, err)
		require.Equal(t, ada, job.Payload)
		require.EqualValues(t, row.Version, job.Version, "the view keeps the stored version")
		require.Equal(t, 1, job.Attempt)
		require.Empty(t, job.Errors)
	}
	newer := claim(v4)
	require.Len(t, newer, 1)
	require.Equal(t, int32(4), newer[0].Version)
	job, err := v4.Decode(liveRow(t, newer[0]))
	require.NoError(t, err)
	require.Equal(t, ada, job.Payload)

	_, err = v3.Decode(liveRow(t, newer[0]))
	require.ErrorIs(t, err, jobs.ErrUndecodable, "a v3 build refuses a v4 payload if it ever sees one")
}

// FuzzDecodePayload: no stored payload or version may make decoding panic;
// every failure is ErrUndecodable.
func FuzzDecodePayload(f *testing.F) {
	k := defineWelcome(f, "welcome")
	for v := 1; v <= 3; v++ {
		f.Add(v, []byte(fixture(f, v)))
	}
	f.Add(1, []byte(`{"name":""}`))
	f.Add(2, []byte(`null`))
	f.Add(9, []byte(`{}`))
	f.Add(-1, []byte(`[`))
	f.Fuzz(func(t *testing.T, version int, raw []byte) {
		_, err := k.DecodePayload(version, raw)
		if err != nil {
			require.ErrorIs(t, err, jobs.ErrUndecodable)
		}
	})
}

// BenchmarkDecodeWithUpgrades decodes a version-1 payload through two
// upgrades, and a current one with none.
func BenchmarkDecodeWithUpgrades(b *testing.B) {
	k := defineWelcome(b, "welcome")
	for _, v := range []int{1, 3} {
		raw := fixture(b, v)
		b.Run(fmt.Sprintf("from_v%d", v), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := k.DecodePayload(v, raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// liveRow is the typed row of a claimed job, as the worker makes it.
func liveRow(t *testing.T, r db.HopperJob) jobs.Row {
	t.Helper()
	row, err := rows.Live(r)
	require.NoError(t, err)
	return row
}
