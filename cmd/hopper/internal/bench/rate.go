package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RateResult is the rate mode: a global limit shared by several worker
// processes, with a backlog larger than the limit lets through.
type RateResult struct {
	Limit      int     `json:"limit"`
	PerSeconds float64 `json:"per_seconds"`
	Processes  int     `json:"processes"`
	// ExactStarts: the limit counted each claim from its last handler
	// start (worker.Rate.ExactStarts).
	ExactStarts bool `json:"exact_starts"`
	// Over the measured Seconds (after every process had started, on the
	// server's clock): the jobs claimed; the rate from the first of those
	// claims to the last, and that as a share of the limit's.
	Seconds           float64 `json:"seconds"`
	Claimed           int64   `json:"claimed"`
	AchievedPerSecond float64 `json:"achieved_per_second"`
	AchievedToLimit   float64 `json:"achieved_to_limit"`
	// The claim statements that took jobs, and their mean size.
	Claims       int     `json:"claims"`
	JobsPerClaim float64 `json:"jobs_per_claim"`
	// The most jobs in any window of the limit's length over the whole
	// run: by claim time (the server's clock in the claim, what the limit
	// counts), and by handler start (claims reach handlers late and
	// bunched: what the limit promises only with ExactStarts).
	MaxClaimedInWindow int `json:"max_claimed_in_any_window"`
	MaxStartedInWindow int `json:"max_started_in_any_window"`
}

func runRate(ctx context.Context, cfg Config, exactStarts bool) (*RateResult, error) {
	s, err := newScratch(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	if err := maintain(ctx, s.pool, "rate_log.sql"); err != nil {
		return nil, err
	}
	// More than the limit lets through in the run, so that the limit, not
	// the backlog, sets the pace.
	perSecond := float64(cfg.Rate) / cfg.RatePer.Seconds()
	backlog := int(perSecond*(cfg.RateDuration.Seconds()+10)*1.2) + cfg.Rate
	if err := enqueueCopy(ctx, s.pool, traced, backlog, 5000, cfg.payload()); err != nil {
		return nil, err
	}
	wcfg := cfg
	wcfg.Workers, wcfg.keep = 1, 0
	wcfg.flow = workerFlow{rate: cfg.Rate, ratePer: cfg.RatePer, rateExactStarts: exactStarts}
	procs := make([]*workerProc, 0, cfg.RateProcesses)
	defer func() {
		for _, p := range procs {
			_, _ = p.stop()
		}
	}()
	for range cfg.RateProcesses {
		p, err := startWorkers(wcfg, s.url, wcfg.workerLabel("rate"))
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	from, err := serverClock(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cfg.RateDuration):
	}
	to, err := serverClock(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		if _, err := p.stop(); err != nil {
			return nil, err
		}
	}
	var started []event
	for _, p := range procs {
		for _, tr := range p.traces { // stopped: no more appends
			started = append(started, event{at: tr.Started, n: 1})
		}
	}
	procs = nil
	claims, err := loggedClaims(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	r := &RateResult{Limit: cfg.Rate, PerSeconds: cfg.RatePer.Seconds(), Processes: cfg.RateProcesses, ExactStarts: exactStarts, Seconds: to.Sub(from).Seconds(),
		MaxClaimedInWindow: maxInWindow(claims, cfg.RatePer), MaxStartedInWindow: maxInWindow(started, cfg.RatePer)}
	var first, last event
	for _, c := range claims {
		if !c.at.Before(from) && c.at.Before(to) {
			if r.Claims == 0 {
				first = c
			}
			last = c
			r.Claimed += int64(c.n)
			r.Claims++
		}
	}
	// The rate between the first claim and the last, the last one's jobs
	// left out: claims of a whole budget at once make a fixed span count
	// one claim more or less by chance.
	if r.Claims > 1 {
		r.AchievedPerSecond = float64(r.Claimed-int64(last.n)) / last.at.Sub(first.at).Seconds()
	}
	r.AchievedToLimit = r.AchievedPerSecond / perSecond
	if r.Claims > 0 {
		r.JobsPerClaim = float64(r.Claimed) / float64(r.Claims)
	}
	return r, nil
}

func serverClock(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	stmt, err := benchSQL.ReadFile("sql/clock.sql")
	if err != nil {
		return time.Time{}, err
	}
	var at time.Time
	if err := pool.QueryRow(ctx, string(stmt)).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("read the server's clock: %w", err)
	}
	return at, nil
}

// loggedClaims reads the claims rate_log.sql's trigger copied.
func loggedClaims(ctx context.Context, pool *pgxpool.Pool) ([]event, error) {
	stmt, err := benchSQL.ReadFile("sql/rate_claims.sql")
	if err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, string(stmt))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (event, error) {
		var e event
		err := row.Scan(&e.at, &e.n)
		return e, err
	})
}
