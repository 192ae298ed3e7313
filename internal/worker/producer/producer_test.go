package producer

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
	"github.com/hopperq/hopper/internal/schemascope"
	"github.com/hopperq/hopper/internal/testbed/passbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// batches records what BatchClaimed observed.
type batches struct {
	mu   sync.Mutex
	seen []int
}

func (b *batches) BatchClaimed(_ string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen = append(b.seen, n)
}

// handed records the jobs a producer handed on.
type handed struct {
	mu   sync.Mutex
	jobs []Claimed
}

func (h *handed) hand(_ *Producer, job Claimed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jobs = append(h.jobs, job)
}

func (h *handed) ids() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []int64
	for _, j := range h.jobs {
		ids = append(ids, j.Row.ID)
	}
	return ids
}

// kindK is the one kind the bed's jobs are of.
var kindK = Kinds{Names: []string{"k"}, MaxVersions: []int32{1}, KeyLimits: []int32{0}, SharedNames: []string{""}, SharedMax: []int32{0}}

// testConfig is a whole Config for queue default of b, its claims handed
// to h.
func testConfig(b *passbed.Bed, m Metrics, h Hand) Config {
	return Config{Queries: b.Q, Pool: b.DB.Pool, Claims: NewClaimBatch(b.Q), Log: b.Log, Metrics: m,
		Name: "default", Slots: 10, Kinds: kindK, Owner: "w", Lease: time.Minute,
		PollInterval: time.Second, FullScanInterval: time.Hour,
		Listening: func() bool { return true }, ReadOnly: func(error) bool { return false }, Reached: func() {}, Hand: h,
		Held: func() func(int64, int32) bool { return func(int64, int32) bool { return false } }}
}

// A producer's claim, driven directly: it claims at most what it is asked
// for, in ready order, takes a slot for each job, moves its scan cursor
// past the last one and hands each on; a claim with nothing ready claims
// nothing and leaves the cursor alone; FreeSlot gives the slots back.
func TestProducerClaim(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	m, h := &batches{}, &handed{}
	p, err := New(testConfig(b, m, h.hand))
	require.NoError(t, err)

	base := time.Now().Add(-time.Minute)
	var ids []int64
	for i := range 3 {
		ids = append(ids, b.Enqueue(base.Add(time.Duration(i)*time.Second)))
	}

	n, err := p.Claim(b.Ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "no more than asked for")
	require.Equal(t, 2, p.Running(), "a slot per job")
	require.Equal(t, ids[1], p.Cursor().ID, "the cursor is past the last job claimed")
	require.Equal(t, ids[:2], h.ids(), "the first two in ready order are handed on, in order")
	for _, j := range h.jobs {
		require.False(t, j.Answered.Before(j.Sent))
		require.Nil(t, j.Rate, "no rate limit: no rate claim")
	}

	n, err = p.Claim(b.Ctx, 5)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, ids, h.ids())
	at := p.Cursor()
	n, err = p.Claim(b.Ctx, 5)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left")
	require.Equal(t, at, p.Cursor(), "an empty claim leaves the cursor")
	require.Equal(t, []int{2, 1, 0}, m.seen, "every claim observed")

	for range 3 {
		p.FreeSlot()
	}
	require.Zero(t, p.Running(), "every slot given back")
}

// Run claims what is ready up to the free slots, waits for a slot once
// they are all taken, and claims at once on a wake-up, well before the
// poll interval.
func TestProducerRunClaimsOnWakeups(t *testing.T) {
	t.Parallel()
	b := passbed.New(t)
	h := &handed{}
	cfg := testConfig(b, &batches{}, h.hand)
	cfg.Slots, cfg.PollInterval = 2, time.Hour
	p, err := New(cfg)
	require.NoError(t, err)
	for range 3 {
		b.Enqueue(time.Now().Add(-time.Second))
	}
	ctx, stop := context.WithCancel(b.Ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx, b.Ctx) }()
	defer func() { stop(); <-done }()

	testdb.WaitFor(t, "both slots taken", func() bool { return len(h.ids()) == 2 })
	require.Equal(t, 2, p.Running())
	p.FreeSlot()
	testdb.WaitFor(t, "the third job claimed for the slot freed", func() bool { return len(h.ids()) == 3 })

	late := b.Enqueue(time.Now().Add(-time.Hour)) // behind the cursor: only a rewind finds it
	p.Rewind(FromStart)
	p.Wake()
	p.FreeSlot()
	testdb.WaitFor(t, "the job announced claimed", func() bool { return len(h.ids()) == 4 })
	require.Equal(t, late, h.ids()[3])
}

// A claim under the claim lock sees the claims before it, and the lock
// ends with the claim. Both ways of running it: as a batch on the pool,
// and in a transaction scoped to the worker's schema.
func TestClaimLockLastsForTheClaimOnly(t *testing.T) {
	t.Parallel()
	for _, scoped := range []bool{false, true} {
		t.Run(map[bool]string{false: "pool", true: "schema"}[scoped], func(t *testing.T) {
			t.Parallel()
			b := passbed.New(t)
			ctx := b.Ctx
			pcfg, err := pgxpool.ParseConfig(b.DB.URL)
			require.NoError(t, err)
			pcfg.MaxConns = 1 // every statement below runs on the claims' session
			pool, err := pgxpool.NewWithConfig(ctx, pcfg)
			require.NoError(t, err)
			defer pool.Close()

			cfg := testConfig(b, &batches{}, (&handed{}).hand)
			cfg.Queries, cfg.Pool, cfg.Flow = db.New(pool), pool, &Flow{KeyLimit: 1}
			if scoped {
				cfg.Scope = schemascope.Wrap(pool, b.DB.Schema)
			}
			limited, err := New(cfg)
			require.NoError(t, err)
			for _, key := range []string{"a", "a", "b"} {
				_, err := b.Q.Enqueue(ctx, db.EnqueueParams{Queue: "default", Kind: "k", Version: 1,
					Payload: json.RawMessage(`{}`), RunAt: time.Now(), MaxAttempts: 3, ConcurrencyKey: &key})
				require.NoError(t, err)
			}

			p := db.DequeueLimitedParams{Owner: "w", LeaseMs: 60_000, Queue: "default",
				Kinds: []string{"k"}, MaxVersions: []int32{1}, KeyLimits: []int32{0}, KeyLimit: 1,
				AfterPriority: -1, MaxJobs: 10, Scan: 64, RateBy: "queue", RateWindowMs: 1000}
			bad := p
			bad.Scan = -1 // LIMIT -1: the statement fails, after the lock
			_, err = limited.claimLimited(ctx, bad)
			require.ErrorContains(t, err, "LIMIT must not be negative")

			first, err := limited.claimLimited(ctx, p)
			require.NoError(t, err)
			require.Len(t, first, 2, "one job of each key")
			again, err := limited.claimLimited(ctx, p)
			require.NoError(t, err)
			require.Empty(t, again, "key a is at its limit")

			var locks int
			require.NoError(t, pool.QueryRow(ctx,
				"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").Scan(&locks))
			require.Zero(t, locks, "the claim lock ends with the claim")
		})
	}
}

// A Config missing what the producer works with, or with a field out of
// its range, is refused at New, naming the field.
func TestProducerConfig(t *testing.T) {
	t.Parallel()
	whole := Config{Queries: db.New(nil), Pool: new(pgxpool.Pool), Claims: NewClaimBatch(db.New(nil)), Log: slog.Default(),
		Metrics: &batches{}, Name: "default", Slots: 1, Kinds: kindK, Owner: "w", Lease: time.Second,
		PollInterval: time.Second, FullScanInterval: time.Minute,
		Listening: func() bool { return false }, ReadOnly: func(error) bool { return false }, Reached: func() {},
		Hand: func(*Producer, Claimed) {}, Held: func() func(int64, int32) bool { return func(int64, int32) bool { return false } }}
	_, err := New(whole)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		edit func(*Config)
		says string
	}{
		"no queries":           {func(c *Config) { c.Queries = nil }, "Queries"},
		"no claims":            {func(c *Config) { c.Claims = nil }, "Claims"},
		"no log":               {func(c *Config) { c.Log = nil }, "Log"},
		"no metrics":           {func(c *Config) { c.Metrics = nil }, "Metrics"},
		"no listening":         {func(c *Config) { c.Listening = nil }, "Listening"},
		"no read-only guard":   {func(c *Config) { c.ReadOnly = nil }, "ReadOnly"},
		"no reached":           {func(c *Config) { c.Reached = nil }, "Reached"},
		"no hand":              {func(c *Config) { c.Hand = nil }, "Hand"},
		"no held":              {func(c *Config) { c.Held = nil }, "Held"},
		"no pool nor scope":    {func(c *Config) { c.Pool = nil }, "Pool or Scope"},
		"no name":              {func(c *Config) { c.Name = "" }, "Name"},
		"no owner":             {func(c *Config) { c.Owner = "" }, "Owner"},
		"no slots":             {func(c *Config) { c.Slots = 0 }, "Slots"},
		"a lease under 1ms":    {func(c *Config) { c.Lease = time.Microsecond }, "Lease"},
		"no poll interval":     {func(c *Config) { c.PollInterval = 0 }, "PollInterval"},
		"no full scan":         {func(c *Config) { c.FullScanInterval = 0 }, "FullScanInterval"},
		"kinds apart":          {func(c *Config) { c.Kinds.MaxVersions = nil }, "Kinds"},
		"a negative key limit": {func(c *Config) { c.Flow = &Flow{KeyLimit: -1} }, "KeyLimit"},
		"an unknown rate group": {func(c *Config) {
			c.Flow = &Flow{Rate: Rate{Limit: 1, Per: time.Second, By: "tenant"}}
		}, "Rate.By"},
		"an empty rate": {func(c *Config) { c.Flow = &Flow{Rate: Rate{Per: time.Second}} }, "Flow.Rate"},
		"a local rate by kind": {func(c *Config) {
			c.Flow = &Flow{Rate: Rate{Limit: 1, Per: time.Second, By: RateByKind, Local: true}}
		}, "local"},
	} {
		cfg := whole
		tc.edit(&cfg)
		_, err := New(cfg)
		require.ErrorContains(t, err, tc.says, name)
	}
}
