package bench

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hopperq/hopper/jobs"
)

// What the flow-control modes share: the worker process's flow control,
// keyed jobs, the traces of timed jobs, and sliding windows.

// workerFlow is the flow control a worker process puts on the default
// queue; the zero value is none.
type workerFlow struct {
	fair     bool
	keyLimit int
	rate     int
	ratePer  time.Duration
	// rateExactStarts: the rate counts each claim from its last handler
	// start
	rateExactStarts bool
}

// keyedItems is n jobs spread round-robin over keys concurrency keys
// named prefix0, prefix1 … (keys 0: without a key).
func keyedItems(payload benchJob, n, keys int, prefix string) []jobs.Item[benchJob] {
	items := jobs.Items(repeat(payload, n)...)
	if keys > 0 {
		for i := range items {
			items[i].Options = []jobs.EnqueueOption{jobs.ConcurrencyKey(fmt.Sprintf("%s%d", prefix, i%keys))}
		}
	}
	return items
}

// jobTrace is when a traced job's handler started and ended, in the worker
// process; the processes run on the benchmark's machine, so their clocks
// are the benchmark's.
type jobTrace struct {
	Key            string
	Started, Ended time.Time
}

// traceReport is the line a worker process prints for a traced job: start
// and end in Unix nanoseconds, then the key (last: it may hold spaces).
const traceReport = "job %d %d "

func formatTrace(t jobTrace) string {
	return fmt.Sprintf(traceReport, t.Started.UnixNano(), t.Ended.UnixNano()) + t.Key
}

func parseTrace(line string) (jobTrace, bool) {
	var started, ended int64
	if _, err := fmt.Sscanf(line, traceReport, &started, &ended); err != nil {
		return jobTrace{}, false
	}
	// Sscanf stops after the second number's space: the rest is the key.
	fields := strings.SplitN(line, " ", 4)
	if len(fields) != 4 {
		return jobTrace{}, false
	}
	return jobTrace{Key: fields[3], Started: time.Unix(0, started), Ended: time.Unix(0, ended)}, true
}

// event is n things that happened at one moment (a claim of n jobs).
type event struct {
	at time.Time
	n  int
}

// maxInWindow is the most things that happened in any window [t, t+width),
// the window a rate limit of width counts in.
func maxInWindow(events []event, width time.Duration) int {
	s := append([]event(nil), events...)
	sort.Slice(s, func(i, j int) bool { return s[i].at.Before(s[j].at) })
	// The busiest window can always start at an event: slide its start
	// over the events, its end over those less than width later.
	most, sum, end := 0, 0, 0
	for start := range s {
		for end < len(s) && s[end].at.Sub(s[start].at) < width {
			sum += s[end].n
			end++
		}
		most = max(most, sum)
		sum -= s[start].n
	}
	return most
}

// tenant names the noisy mode's tenants: A floods, B, C … are its
// neighbours.
func tenant(i int) string {
	if i < 26 {
		return string(rune('A' + i))
	}
	return fmt.Sprintf("T%d", i)
}
