package bench

import (
	"context"
	"fmt"
)

// KeysResult is the keys mode: the continuous run without concurrency
// keys, then with its jobs spread over Keys keys under a per-key limit,
// and the second's steady state as a share of the first's.
type KeysResult struct {
	Keys     int               `json:"keys"`
	KeyLimit int               `json:"key_limit"`
	Without  *ContinuousResult `json:"without_keys"`
	With     *ContinuousResult `json:"with_keys"`
	Ratio    float64           `json:"steady_with_to_without"`
}

func runKeys(ctx context.Context, cfg Config) (*KeysResult, error) {
	plain := cfg
	plain.HoldSnapshot, plain.Burst, plain.keep = false, 0, 0
	r := &KeysResult{Keys: cfg.Keys, KeyLimit: cfg.KeyLimit}
	var err error
	if r.Without, err = continuousOnce(ctx, plain, 0); err != nil {
		return r, fmt.Errorf("without keys: %w", err)
	}
	keyed := plain
	keyed.keyed, keyed.flow = cfg.Keys, workerFlow{keyLimit: cfg.KeyLimit}
	if r.With, err = continuousOnce(ctx, keyed, 0); err != nil {
		return r, fmt.Errorf("with keys: %w", err)
	}
	if r.Without.SteadyWorkedPerSecond > 0 {
		r.Ratio = r.With.SteadyWorkedPerSecond / r.Without.SteadyWorkedPerSecond
	}
	return r, nil
}
