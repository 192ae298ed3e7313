package cli

import (
	"errors"
	"flag"
	"time"
)

// durationValue is a duration flag that reads what every duration of the
// CLI reads (parseDuration): Go's durations (90s, 2h) and days (7d).
type durationValue struct{ p *time.Duration }

func (d durationValue) String() string {
	if d.p == nil {
		return "0s"
	}
	return d.p.String()
}

func (d durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return errors.New("want a duration like 90s, 2h or 7d")
	}
	*d.p = v
	return nil
}

// durationVar declares a duration flag, as fs.DurationVar does, that also
// takes days (7d), like --older-than, --since and --run-at.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationValue{p}, name, usage)
}
