package worker_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/worker"
)

// TestStorableText: a table of the texts that made the server refuse a
// whole batch of outcomes, and what is stored instead.
func TestStorableText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", worker.MaxMessageBytes) // two bytes each
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "connection refused", "connection refused"},
		{"NUL", "bad\x00byte", "bad\uFFFDbyte"},
		{"invalid UTF-8", "upload: \xff\xfe header", "upload: \uFFFD header"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, worker.StorableText(tc.in))
		})
	}
	got := worker.StorableText(long)
	require.LessOrEqual(t, len(got), worker.MaxMessageBytes)
	require.True(t, utf8.ValidString(got))
	require.Contains(t, got, "[cut by hopper: ")
}

// TestStorableProperty: whatever bytes a handler's error or result holds,
// what the worker stores of it is taken by PostgreSQL, as text in jsonb
// and as jsonb. Seeded: a failure prints the seed that reproduces it.
func TestStorableProperty(t *testing.T) {
	b := setup(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOPPER_STORABLE_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (HOPPER_STORABLE_SEED=%d reproduces this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	pieces := []string{"\x00", "\xff", "\xc3", "é", "\\u0000", `"`, "\\", "\u2028", "a", " ", "\n"}
	text := func() string {
		var sb strings.Builder
		for n := rng.IntN(40); n > 0; n-- {
			if rng.IntN(4) == 0 {
				sb.WriteByte(byte(rng.IntN(256)))
			} else {
				sb.WriteString(pieces[rng.IntN(len(pieces))])
			}
		}
		return sb.String()
	}
	for i := range 300 {
		msg := worker.StorableText(text())
		var stored string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT jsonb_build_object('error', $1::text) ->> 'error'", msg).Scan(&stored),
			"seed %d, case %d: message %q", seed, i, msg)
		require.Equal(t, msg, stored)

		// A result: any JSON a handler marshals, with strings of any bytes,
		// or bytes that are not JSON at all.
		var raw json.RawMessage
		switch rng.IntN(3) {
		case 0:
			raw, _ = json.Marshal(map[string]any{text(): []any{text(), 1.5, nil, map[string]string{"k": text()}}})
		case 1:
			raw, _ = json.Marshal(text())
		default:
			raw = json.RawMessage(text())
		}
		res := worker.StorableJSON(raw)
		if len(raw) == 0 {
			require.Empty(t, res, "no result stays none (NULL)")
			continue
		}
		require.True(t, json.Valid(res), "seed %d, case %d: %q", seed, i, res)
		var back []byte
		require.NoError(t, b.Pool.QueryRow(b.Ctx, "SELECT $1::jsonb", string(res)).Scan(&back),
			"seed %d, case %d: result %q from %q", seed, i, res, raw)
	}
}
