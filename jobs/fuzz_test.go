package jobs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hopperq/hopper/jobs"
)

// FuzzEnqueueOptions: no combination of options and payload may panic, and
// every refusal wraps one of the documented sentinels.
func FuzzEnqueueOptions(f *testing.F) {
	k := jobs.MustDefine[Note]("fuzz.note", jobs.MaxPayloadBytes(256))
	f.Add("default", 0, 25, int64(0), "", false, "hello")
	f.Add("", -1, 0, int64(-5), "", true, "")
	f.Add("q'; DROP TABLE hopper_jobs;--", 9, 1, int64(time.Hour), "key\x00", true, "\xff\xfe")
	f.Fuzz(func(t *testing.T, queue string, priority, maxAttempts int, delay int64, key string, withKey bool, text string) {
		opts := []jobs.EnqueueOption{jobs.Queue(queue), jobs.Priority(priority), jobs.MaxAttempts(maxAttempts), jobs.Delay(time.Duration(delay))}
		if withKey {
			opts = append(opts, jobs.UniqueKey(key))
		}
		err := k.Check(Note{Text: text}, opts...)
		if err == nil {
			return
		}
		for _, sentinel := range []error{jobs.ErrInvalidQueue, jobs.ErrInvalidPriority, jobs.ErrInvalidMaxAttempts,
			jobs.ErrInvalidRunAt, jobs.ErrInvalidUniqueKey, jobs.ErrMarshal, jobs.ErrPayloadTooLarge} {
			if errors.Is(err, sentinel) {
				return
			}
		}
		t.Fatalf("refusal without a sentinel: %v", err)
	})
}
