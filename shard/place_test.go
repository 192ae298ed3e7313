package shard

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

// TestPositionIsMD5sFirstFourBytes: the hash is the one the SQL function
// computes (the first four bytes of MD5, big-endian, mod count), pinned on
// known values so that a change to it, which would move every keyed job
// of a running deployment to another shard, fails here.
// (tests/citus compares it with the SQL function on seeded keys.)
func TestPositionIsMD5sFirstFourBytes(t *testing.T) {
	for _, key := range []string{"", "tenant-42", "é中😀"} {
		sum := md5.Sum([]byte(key))
		u := binary.BigEndian.Uint32(sum[:4])
		for _, n := range []int{1, 2, 3, 4, 16, 64, 1024} {
			require.Equal(t, int(u%uint32(n)), Position(key, n), "%q among %d", key, n)
		}
	}
	// md5('') = d41d8cd9…: 0xd41d8cd9 = 3558706393.
	require.Equal(t, int(3558706393%16), Position("", 16))
	require.Equal(t, 0, Position("anything", 0), "no shards: position 0, never a panic")
}

func TestNamePadsThePosition(t *testing.T) {
	require.Equal(t, "hopper_s00", Name("", 0, 4))
	require.Equal(t, "hopper_s03", Name("hopper_s", 3, 4))
	require.Equal(t, "q_99", Name("q_", 99, 100))
	require.Equal(t, "q_099", Name("q_", 99, 101))
	require.Equal(t, "q_007", Name("q_", 7, 1000))
	require.ErrorIs(t, Options{Count: 0}.check(), ErrInvalidOptions)
	require.ErrorIs(t, Options{Count: MaxCount + 1}.check(), ErrInvalidOptions)
	require.ErrorIs(t, Options{Count: 4, Prefix: string(make([]byte, 70))}.check(), ErrInvalidOptions)
	require.NoError(t, Options{Count: 4, Prefix: DefaultPrefix}.check())
}

// TestPlacementOrder: a sequence key given as metadata places a job
// first, then the unique key, then the
// concurrency key, then the routing key, else the shards take turns.
func TestPlacementOrder(t *testing.T) {
	kind := jobs.MustDefine[struct{}]("shard_placement_order")
	s := &Set{names: []string{"a", "b", "c", "d", "e", "f", "g"}}
	e := kind.Entry(struct{}{}, jobs.Metadata(jobs.Meta{jobs.MetaSequence: "s1"}), jobs.UniqueKey("u1"), jobs.ConcurrencyKey("c1"))
	require.NoError(t, e.Err())
	require.Equal(t, Position("s1", 7), s.place(e, "r1"))
	e = kind.Entry(struct{}{}, jobs.UniqueKey("u1"), jobs.ConcurrencyKey("c1"))
	require.Equal(t, Position("u1", 7), s.place(e, "r1"))
	e = kind.Entry(struct{}{}, jobs.ConcurrencyKey("c1"))
	require.Equal(t, Position("c1", 7), s.place(e, "r1"))
	e = kind.Entry(struct{}{})
	require.Equal(t, Position("r1", 7), s.place(e, "r1"))
	var turns []int
	for range 14 {
		turns = append(turns, s.place(e, ""))
	}
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6}, turns)
	require.Equal(t, "d", s.ShardOfID(3))
	require.Equal(t, "a", s.ShardOfID(14))
	require.Equal(t, "", s.ShardOfID(0))
}

// TestListCursorIsTheClients: the cursor the Set's ListJobs hands out is
// the one hopper.Client.ListJobs hands out and reads, so that a page
// continues every shard at once.
func TestListCursorIsTheClients(t *testing.T) {
	d := testdb.New(t)
	ctx := context.Background()
	kind := jobs.MustDefine[struct{}]("shard_list_cursor")
	for range 3 {
		_, err := kind.Enqueue(ctx, d.Pool, struct{}{})
		require.NoError(t, err)
	}
	page, err := hopper.NewClient(d.Pool).ListJobs(ctx, hopper.ListParams{Limit: 1})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, page.Next, listCursor(page.Jobs[0].ID))
}
