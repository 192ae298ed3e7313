package bench

import (
	"context"
	"fmt"
)

// KeysResult is the keys mode: the continuous run without concurrency
// keys, then with its jobs spread over Keys keys under a per-key limit,
// each twice in the order without, with, with, without, and the second
// kind's mean steady state as a share of the first's. The order puts each
// kind first and last once: whatever drifts over the runs (an autovacuum
// the scratch cluster starts a minute in, the machine's other load) weighs
// on both alike.
type KeysResult struct {
	Keys     int                 `json:"keys"`
	KeyLimit int                 `json:"key_limit"`
	Without  []*ContinuousResult `json:"without_keys"`
	With     []*ContinuousResult `json:"with_keys"`
	Ratio    float64             `json:"steady_with_to_without"`
}

func runKeys(ctx context.Context, cfg Config) (*KeysResult, error) {
	plain := cfg
	plain.HoldSnapshot, plain.Burst, plain.keep = false, 0, 0
	keyed := plain
	keyed.keyed, keyed.flow = cfg.Keys, workerFlow{keyLimit: cfg.KeyLimit}
	r := &KeysResult{Keys: cfg.Keys, KeyLimit: cfg.KeyLimit}
	for _, withKeys := range []bool{false, true, true, false} {
		run, label, into := plain, "without keys", &r.Without
		if withKeys {
			run, label, into = keyed, "with keys", &r.With
		}
		c, err := continuousOnce(ctx, run, 0)
		if err != nil {
			return r, fmt.Errorf("%s: %w", label, err)
		}
		*into = append(*into, c)
	}
	if without := meanSteady(r.Without); without > 0 {
		r.Ratio = meanSteady(r.With) / without
	}
	return r, nil
}

// meanSteady is the mean of the runs' steady states.
func meanSteady(runs []*ContinuousResult) float64 {
	if len(runs) == 0 {
		return 0
	}
	sum := 0.0
	for _, c := range runs {
		sum += c.SteadyWorkedPerSecond
	}
	return sum / float64(len(runs))
}

// KeysLabel describes the keyed runs: under a per-key limit, or with limit
// 0 the keys alone, claimed by the plain Dequeue (no flow control): what
// carrying a key costs by itself.
func KeysLabel(keys, limit int) string {
	if limit == 0 {
		return fmt.Sprintf("%d keys, no flow control", keys)
	}
	return fmt.Sprintf("%d keys, at most %d running each", keys, limit)
}
