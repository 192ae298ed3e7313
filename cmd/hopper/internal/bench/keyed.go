package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hopperq/hopper"
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
	// Tiered: the keyed runs again with a tenth of the keys given a limit
	// of their own (TierLimit, in hopper_key_limits), in the same run as
	// the fixed limit (order: without, with, tiered, tiered, with,
	// without); TierRatio is their mean steady state over the fixed
	// limit's. None without a key limit.
	TierKeys  int                 `json:"tier_keys,omitempty"`
	TierLimit int                 `json:"tier_limit,omitempty"`
	Tiered    []*ContinuousResult `json:"with_tiers,omitempty"`
	TierRatio float64             `json:"steady_tiers_to_fixed,omitempty"`
}

func runKeys(ctx context.Context, cfg Config) (*KeysResult, error) {
	plain := cfg
	plain.HoldSnapshot, plain.Burst, plain.keep = false, 0, 0
	keyed := plain
	keyed.keyed, keyed.flow = cfg.Keys, workerFlow{keyLimit: cfg.KeyLimit}
	tiered := keyed
	r := &KeysResult{Keys: cfg.Keys, KeyLimit: cfg.KeyLimit}
	order := []int{0, 1, 1, 0}
	if cfg.KeyLimit > 0 {
		tiered.tiers, tiered.tierLimit = max(cfg.Keys/10, 1), 4*cfg.KeyLimit
		r.TierKeys, r.TierLimit = tiered.tiers, tiered.tierLimit
		order = []int{0, 1, 2, 2, 1, 0}
	}
	for _, variant := range order {
		run, label, into := plain, "without keys", &r.Without
		switch variant {
		case 1:
			run, label, into = keyed, "with keys", &r.With
		case 2:
			run, label, into = tiered, "with tiers", &r.Tiered
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
	if fixed := meanSteady(r.With); fixed > 0 && len(r.Tiered) > 0 {
		r.TierRatio = meanSteady(r.Tiered) / fixed
	}
	return r, nil
}

// addTiers gives the first n keys (key-0 …) a limit of their own.
func addTiers(ctx context.Context, pool *pgxpool.Pool, n, limit int) error {
	client := hopper.NewClient(pool)
	for i := range n {
		if err := client.SetKeyLimit(ctx, "default", fmt.Sprintf("key-%d", i), limit); err != nil {
			return err
		}
	}
	return nil
}

// TiersLabel describes the tiered runs.
func TiersLabel(keys, limit, tierKeys, tierLimit int) string {
	return fmt.Sprintf("%s, %d of them at most %d (hopper_key_limits)", KeysLabel(keys, limit), tierKeys, tierLimit)
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
