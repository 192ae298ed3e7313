package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
)

// The soak at CI size on the shared server, worked by this test binary as
// the worker process: every kind of its mix runs, retention prunes, the
// samples and the chart come out, and every job is accounted for (the run
// fails otherwise). Nothing is judged for speed or size.
func TestSoakMode(t *testing.T) {
	testdb.Slow(t, "a hopper bench mode runs, with worker processes")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := sharedServer(ctx, t)
	self, err := os.Executable()
	require.NoError(t, err)
	chart := filepath.Join(t.TempDir(), "soak.svg")
	var log strings.Builder
	o := SoakOptions{Duration: 12 * time.Second, Sample: 3 * time.Second, Rate: 300, Keep: 2 * time.Second, Chart: chart}
	r, err := Run(ctx, Config{Mode: "soak", Workers: 1, Concurrency: 20, Soak: o,
		DatabaseURL: url, WorkerCommand: []string{self, testWorkerArg}, Log: &log})
	require.NoError(t, err, log.String())
	s := r.Soak
	require.NotNil(t, s)

	require.Len(t, s.Samples, 5, "a sample at the start and one every 3s of 12s")
	for i, smp := range s.Samples {
		require.Len(t, smp.Tables, len(soakTables))
		for j, tb := range smp.Tables {
			require.Equal(t, soakTables[j], tb.Name)
			require.Equal(t, 1, tb.Partitions, "%s: a plain table is its own one partition, and a keep of 2s makes no time partitions", tb.Name)
			require.Positive(t, tb.Bytes(), "%s in sample %d", tb.Name, i)
		}
		if i > 0 {
			require.Positive(t, smp.WorkedPerSecond, "sample %d", i)
			require.Greater(t, smp.Seconds, s.Samples[i-1].Seconds)
		}
	}
	require.Equal(t, 1, s.Reference, "a third of 12s is the first sample after the start")
	require.Len(t, s.SizeRatios, len(soakTables))
	// The mix: every class ran, the failures died, the schedule fired.
	require.Positive(t, s.Failing)
	require.Equal(t, s.Failing, s.Dead)
	require.Positive(t, s.Ticks)
	require.Greater(t, s.Enqueued, int64(3*o.Rate), "12 s at 300/s offered")
	require.GreaterOrEqual(t, s.Completed, s.Enqueued-s.Failing)

	// Retention ran: with jobs kept 2 s, the history and the dead table
	// hold far fewer rows than went through them.
	last := s.Samples[len(s.Samples)-1]
	t.Logf("history and dead jobs at the end: %d rows of %d enqueued", last.Tables[1].LiveTuples+last.Tables[2].LiveTuples, s.Enqueued)
	require.Less(t, last.Tables[1].LiveTuples+last.Tables[2].LiveTuples, s.Enqueued/2, "history and dead jobs pruned")

	svg, err := os.ReadFile(chart)
	require.NoError(t, err)
	requireWellFormedSVG(t, svg, 4) // three sizes and the rate
	var out bytes.Buffer
	s.Print(&out)
	require.Contains(t, out.String(), "nothing lost")
}

// requireWellFormedSVG: the chart parses as XML and draws lines lines.
func requireWellFormedSVG(t *testing.T, svg []byte, lines int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	polylines := 0
	for {
		tok, err := d.Token()
		if err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "polyline" {
			polylines++
		}
	}
	require.Equal(t, lines, polylines)
}

// The reference sample and the ratios, for long and short runs.
func TestSoakJudge(t *testing.T) {
	t.Parallel()
	sample := func(secs, rate float64, bytes int64) SoakSample {
		tables := make([]SoakTable, len(soakTables))
		for i, name := range soakTables {
			tables[i] = SoakTable{Name: name, TableBytes: bytes}
		}
		return SoakSample{Seconds: secs, WorkedPerSecond: rate, Tables: tables}
	}
	for _, tc := range []struct {
		name     string
		duration time.Duration
		samples  []SoakSample
		ref      int
		size     float64
		worked   float64
	}{
		{"an hour: the sample at ten minutes", time.Hour,
			[]SoakSample{sample(0, 0, 10), sample(300, 900, 50), sample(600, 1000, 100), sample(1800, 1000, 110), sample(3600, 950, 120)}, 2, 1.2, 0.95},
		{"a minute: the sample at a third", time.Minute,
			[]SoakSample{sample(0, 0, 10), sample(20, 1000, 100), sample(40, 1000, 100), sample(60, 500, 300)}, 1, 3, 0.5},
		{"the first sample after the start at the least", time.Minute,
			[]SoakSample{sample(0, 0, 10), sample(30, 1000, 100), sample(60, 1000, 100)}, 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &SoakResult{Samples: tc.samples, SizeRatios: map[string]float64{}}
			r.judge(SoakOptions{Duration: tc.duration})
			require.Equal(t, tc.ref, r.Reference)
			for _, name := range soakTables {
				require.InDelta(t, tc.size, r.SizeRatios[name], 1e-9, name)
			}
			require.InDelta(t, tc.worked, r.WorkedRatio, 1e-9)
		})
	}
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.01: 2, 3: 5, 7: 10, 42: 50, 1234: 2000} {
		require.InDelta(t, want, niceCeil(in), 1e-9, "niceCeil(%v)", in)
	}
}
