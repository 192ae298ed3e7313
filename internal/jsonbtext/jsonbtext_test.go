package jsonbtext_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/jsonbtext"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// server measures raw as the tables' checks do, or returns the server's
// refusal.
func server(ctx context.Context, conn *pgx.Conn, raw string) (int, error) {
	var n int
	err := conn.QueryRow(ctx, "SELECT octet_length($1::text::jsonb::text)", raw).Scan(&n)
	return n, err
}

func connect(t *testing.T) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, testdb.Server(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return ctx, conn
}

// TestLenCases: the shapes where Go's JSON and jsonb's text differ, each
// measured by the server too.
func TestLenCases(t *testing.T) {
	t.Parallel()
	ctx, conn := connect(t)
	for _, raw := range []string{
		`{"a":1,"b":[1,2,3]}`, `{}`, `[]`, `[{}, [], ""]`, `"<>&"`, `"\u003c\u003e\u0026"`, `"\u2028"`,
		`"\"\\\/\b\f\n\r\t"`, `"\u0001\u001f"`, `"é😀"`, `"\ud83d\ude00"`, `1e+21`, `1e21`, `1.5e-7`, `-0`, `-0.00`,
		`1.50`, `100e-2`, `0e5`, `0.00e1`, `123456789012345678901234567890`, `-1.5E+3`, `{"k":1,"k":[1,2]}`, `1e131071`, `1e-16383`,
		`true`, `false`, `null`, ` { "a" : [ 1 , 2 ] } `,
	} {
		want, err := server(ctx, conn, raw)
		require.NoError(t, err, raw)
		got, err := jsonbtext.Len([]byte(raw))
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
	}
	for _, raw := range []string{`"\u0000"`, `{"a\u0000":1}`, `"\ud800"`, `"\udc00x"`, `1e131072`, `1.5e-16383`, "\"\xff\""} {
		_, serr := server(ctx, conn, raw)
		require.Error(t, serr, "the server refuses %s", raw)
		_, err := jsonbtext.Len([]byte(raw))
		require.ErrorIs(t, err, jsonbtext.ErrNotStorable, raw)
	}
}

// TestLenProperty: random documents — nested objects with duplicate
// keys, strings of escapes, control characters, '<>&', surrogate pairs
// raw and escaped, numbers in every notation, a rare NUL or lone
// surrogate — measured by Len and by the server: the same length, or
// both refuse. HOPPER_JSONB_SEED replays a seed.
func TestLenProperty(t *testing.T) {
	t.Parallel()
	ctx, conn := connect(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOPPER_JSONB_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := range 2000 {
		raw := gen(rng, 3)
		want, serr := server(ctx, conn, raw)
		got, err := jsonbtext.Len([]byte(raw))
		if serr != nil {
			require.ErrorIs(t, err, jsonbtext.ErrNotStorable, "seed %d, document %d: %s (server: %v)", seed, i, raw, serr)
			continue
		}
		require.NoError(t, err, "seed %d, document %d: %s", seed, i, raw)
		require.Equal(t, want, got, "seed %d, document %d: %s", seed, i, raw)
	}
	// Go's own output, which is what the worker measures.
	for i := range 300 {
		v := goValue(rng, 3)
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		want, serr := server(ctx, conn, string(raw))
		got, err := jsonbtext.Len(raw)
		if serr != nil {
			require.ErrorIs(t, err, jsonbtext.ErrNotStorable, "seed %d, value %d: %s (server: %v)", seed, i, raw, serr)
			continue
		}
		require.NoError(t, err, "seed %d, value %d: %s", seed, i, raw)
		require.Equal(t, want, got, "seed %d, value %d: %s", seed, i, raw)
	}
}

func ws(rng *rand.Rand) string {
	return []string{"", "", "", " ", "\n", " \t "}[rng.IntN(6)]
}

func gen(rng *rand.Rand, depth int) string {
	k := rng.IntN(10)
	if depth == 0 {
		k = 3 + rng.IntN(7)
	}
	switch {
	case k < 2:
		n := rng.IntN(5)
		parts := make([]string, n)
		for i := range parts {
			key := []string{`"a"`, `"b"`, `"<k>"`, `"é"`, `"\u0041"`, `"a\nb"`}[rng.IntN(6)]
			parts[i] = ws(rng) + key + ws(rng) + ":" + ws(rng) + gen(rng, depth-1) + ws(rng)
		}
		return "{" + strings.Join(parts, ",") + ws(rng) + "}"
	case k < 4:
		n := rng.IntN(5)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = ws(rng) + gen(rng, depth-1) + ws(rng)
		}
		return "[" + strings.Join(parts, ",") + ws(rng) + "]"
	case k < 7:
		return genString(rng)
	case k < 9:
		return genNumber(rng)
	default:
		return []string{"true", "false", "null"}[rng.IntN(3)]
	}
}

func genString(rng *rand.Rand) string {
	var b strings.Builder
	b.WriteByte('"')
	for range rng.IntN(12) {
		switch rng.IntN(16) {
		case 0:
			b.WriteString(`\"`)
		case 1:
			b.WriteString(`\\`)
		case 2:
			b.WriteString([]string{`\/`, `\b`, `\f`, `\n`, `\r`, `\t`}[rng.IntN(6)])
		case 3:
			fmt.Fprintf(&b, `\u%04x`, 1+rng.IntN(0x1f)) // a control character
		case 4:
			b.WriteString([]string{"<", ">", "&", "\u2028", "é", "😀", "\u007f"}[rng.IntN(7)])
		case 5:
			fmt.Fprintf(&b, `\u%04X`, []int{0x3c, 0x26, 0x2028, 0xe9, 0x7f, 0xfffd}[rng.IntN(6)])
		case 6:
			b.WriteString(`\ud83d\ude00`) // a surrogate pair
		case 7:
			if rng.IntN(20) == 0 {
				b.WriteString([]string{`\u0000`, `\ud800`, `\udfff`}[rng.IntN(3)])
			}
		default:
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	b.WriteByte('"')
	return b.String()
}

func genNumber(rng *rand.Rand) string {
	var b strings.Builder
	if rng.IntN(3) == 0 {
		b.WriteByte('-')
	}
	if rng.IntN(3) == 0 {
		b.WriteByte('0')
	} else {
		b.WriteByte(byte('1' + rng.IntN(9)))
		for range rng.IntN(25) {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
	}
	if rng.IntN(2) == 0 {
		b.WriteByte('.')
		for range 1 + rng.IntN(20) {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
	}
	if rng.IntN(2) == 0 {
		b.WriteString([]string{"e", "E"}[rng.IntN(2)])
		b.WriteString([]string{"", "+", "-"}[rng.IntN(3)])
		b.WriteString(strconv.Itoa(rng.IntN(40)))
	}
	return b.String()
}

// goValue is a random Go value of the kinds handlers return.
func goValue(rng *rand.Rand, depth int) any {
	k := rng.IntN(8)
	if depth == 0 {
		k = 3 + rng.IntN(5)
	}
	switch k {
	case 0, 1:
		m := map[string]any{}
		for range rng.IntN(5) {
			m[strings.Trim(genString(rng), `"`)] = goValue(rng, depth-1)
		}
		return m
	case 2:
		s := make([]any, rng.IntN(5))
		for i := range s {
			s[i] = goValue(rng, depth-1)
		}
		return s
	case 3:
		return []float64{0, -0.5, 1e21, 1.5e-7, 123456.789, 1e300, -2.5e-300, 3}[rng.IntN(8)] * float64(1+rng.IntN(3))
	case 4:
		return rng.Int64() - rng.Int64()
	case 5:
		var b strings.Builder
		for range rng.IntN(10) {
			b.WriteRune([]rune{'a', '<', '&', '\u2028', '"', '\\', '\n', '\x01', 'é', '😀', 0xfffd}[rng.IntN(11)])
		}
		if rng.IntN(30) == 0 {
			b.WriteByte(0)
		}
		return b.String()
	default:
		return rng.IntN(2) == 0
	}
}
