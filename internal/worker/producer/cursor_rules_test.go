package producer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/db"
)

// TestClaimCursorRules: the cursor's transitions, one rule per case.
func TestClaimCursorRules(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	job := func(priority int16, sec int, id int64) db.HopperJob {
		return db.HopperJob{Priority: priority, RunAt: t0.Add(time.Duration(sec) * time.Second), ID: id}
	}
	key := func(priority int16, sec int, id int64) Key { return KeyOf(job(priority, sec, id)) }
	const every = time.Minute

	for _, tc := range []struct {
		name string
		run  func(c *scanCursor) Key // returns where the next claim starts
		want Key
	}{
		{"a new cursor scans from the start", func(c *scanCursor) Key {
			return c.begin(t0, true)
		}, FromStart},
		{"a claim moves it past the furthest job claimed, whatever the rows' order", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(0, 2, 9), job(0, 3, 5), job(0, 1, 12)})
			return c.begin(t0, true)
		}, key(0, 3, 5)},
		{"priority comes first in claim order", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(1, 0, 1), job(0, 9, 2)})
			return c.begin(t0, true)
		}, key(1, 0, 1)},
		{"a limited claim does not pass the last job its head considered", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimedWithin([]db.HopperJob{job(0, 1, 1), job(0, 50, 90)}, key(0, 5, 7))
			return c.begin(t0, true)
		}, key(0, 5, 7)},
		{"a limited claim within its head moves as any claim", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimedWithin([]db.HopperJob{job(0, 1, 1), job(0, 3, 4)}, key(0, 5, 7))
			return c.begin(t0, true)
		}, key(0, 3, 4)},
		{"a limited claim without a head is not capped", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimedWithin([]db.HopperJob{job(0, 3, 4)}, Key{Priority: -1})
			return c.begin(t0, true)
		}, key(0, 3, 4)},
		{"a claim that finds nothing leaves it", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			c.begin(t0, true)
			c.claimed(nil)
			return c.begin(t0, true)
		}, key(0, 3, 5)},
		{"a wake-up behind it moves it back to just before the job", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			c.rewind(key(0, 1, 7))
			return c.begin(t0, true)
		}, key(0, 1, 6)},
		{"a wake-up ahead of it leaves it", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			c.rewind(key(0, 4, 7))
			return c.begin(t0, true)
		}, key(0, 3, 5)},
		{"a wake-up during a claim wins over the claim's answer", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.rewind(key(0, 1, 7))
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			return c.begin(t0, true)
		}, key(0, 1, 6)},
		{"the earliest of several wake-ups during a claim wins", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.rewind(key(0, 2, 7))
			c.rewind(key(0, 1, 8))
			c.rewind(key(0, 2, 1))
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			return c.begin(t0, true)
		}, key(0, 1, 7)},
		{"a wake-up without a place rewinds to the start", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			c.rewind(FromStart)
			return c.begin(t0, true)
		}, FromStart},
		{"a claim without an answer rewinds to the start", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			c.begin(t0, true)
			c.failed()
			return c.begin(t0, true)
		}, FromStart},
		{"while wake-ups cannot arrive, claims scan from the start", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			return c.begin(t0, false)
		}, FromStart},
		{"a full scan is due every interval", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			return c.begin(t0.Add(every), true)
		}, FromStart},
		{"and not before", func(c *scanCursor) Key {
			c.begin(t0, true)
			c.claimed([]db.HopperJob{job(0, 3, 5)})
			return c.begin(t0.Add(every-time.Millisecond), true)
		}, key(0, 3, 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.run(newScanCursor(every)))
		})
	}
}
