package dashboard

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hopperq/hopper"
)

// sample is the queue at one moment, for the overview's charts.
type sample struct {
	at       time.Time
	depth    int64         // ready + scheduled + running, each count up to sampleDepthLimit
	capped   bool          // a count of depth reached the limit: there are at least depth
	lag      time.Duration // the oldest ready job's wait
	finished int64         // jobs ever removed from the live table
}

// sampleDepthLimit caps each count of a sample's depth: a sample reads at
// most this many index entries (plus one) per count and queue, not the
// table, every SampleEvery, whether or not anyone looks.
const sampleDepthLimit = hopper.DefaultDepthLimit

// sampleOf adds up the queues' depths: the live jobs, and the longest
// claim lag.
func sampleOf(at time.Time, depths []hopper.QueueDepth, finished int64) sample {
	s := sample{at: at, finished: finished}
	for _, d := range depths {
		s.depth += d.Ready + d.Scheduled + d.Running
		s.capped = s.capped || d.Capped()
		s.lag = max(s.lag, d.OldestReady)
	}
	return s
}

// sampler keeps the last samples, oldest first, in a fixed window.
type sampler struct {
	mu   sync.Mutex
	keep int
	s    []sample
}

func newSampler(keep time.Duration) *sampler { return &sampler{keep: max(int(keep), 2)} }

func (p *sampler) add(s sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.s = append(p.s, s)
	if len(p.s) > p.keep {
		p.s = append(p.s[:0], p.s[len(p.s)-p.keep:]...)
	}
}

func (p *sampler) all() []sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sample(nil), p.s...)
}

// chart is one small time-series chart, drawn as an SVG polyline.
type chart struct {
	Title  string
	Now    string // the last value, in words
	Points string // "x,y x,y …" in a 300×60 box
}

const chartW, chartH = 300.0, 60.0

// charts draws depth, claim lag and completions per minute.
func charts(ss []sample) []chart {
	depth := make([]float64, len(ss))
	lag := make([]float64, len(ss))
	var done []float64
	for i, s := range ss {
		depth[i] = float64(s.depth)
		lag[i] = s.lag.Seconds()
		if i > 0 {
			secs := s.at.Sub(ss[i-1].at).Seconds()
			rate := 0.0
			if secs > 0 && s.finished >= ss[i-1].finished {
				rate = float64(s.finished-ss[i-1].finished) / secs * 60
			}
			done = append(done, rate)
		}
	}
	last := func(v []float64, format string) string {
		if len(v) == 0 {
			return "no samples yet"
		}
		return fmt.Sprintf(format, v[len(v)-1])
	}
	depthNow := last(depth, "%.0f")
	if len(ss) > 0 && ss[len(ss)-1].capped {
		depthNow = "at least " + depthNow
	}
	return []chart{
		{Title: "Depth (live jobs)", Now: depthNow, Points: polyline(depth)},
		{Title: "Claim lag (seconds)", Now: last(lag, "%.1f s"), Points: polyline(lag)},
		{Title: "Completions per minute", Now: last(done, "%.0f/min"), Points: polyline(done)},
	}
}

func polyline(v []float64) string {
	if len(v) < 2 {
		return ""
	}
	top := 0.0
	for _, x := range v {
		top = max(top, x)
	}
	if top == 0 {
		top = 1
	}
	var b strings.Builder
	for i, x := range v {
		fmt.Fprintf(&b, "%.1f,%.1f ", float64(i)/float64(len(v)-1)*chartW, chartH-x/top*(chartH-4)-2)
	}
	return strings.TrimSpace(b.String())
}
