package hopper

import (
	"context"
	"fmt"
	"time"

	"github.com/hopperq/hopper/jobs"
)

// waitExplainTimeout bounds the reads that say, once WaitJob's caller's
// deadline has passed, what the job still waits for: the caller is done
// waiting, so they must be quick, and a database that does not answer
// leaves the error as it was.
const waitExplainTimeout = 2 * time.Second

// stillLive says what job id is waiting for, read once when WaitJob's
// caller's deadline passed: "context deadline exceeded" alone does not
// tell a queue nobody serves from a handler still running or a job
// asleep for a day. It reads on a fresh context (the caller's has
// ended), and returns "" when the job cannot be read.
func (c *Client) stillLive(ctx context.Context, id int64) string {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), waitExplainTimeout)
	defer cancel()
	row, err := c.GetJob(rctx, id)
	if err != nil {
		return ""
	}
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch row.State {
	case jobs.StatePending:
		s := fmt.Sprintf("job %d is still pending in queue %q, due since %s", id, row.Queue, at(row.RunAt))
		queues, err := c.ListQueues(rctx)
		if err != nil {
			return s
		}
		for _, q := range queues {
			switch {
			case q.Name != row.Queue:
			case q.PausedAt != nil:
				return s + fmt.Sprintf(": the queue is paused (since %s; ResumeQueue, or hopper queues resume %s)", at(*q.PausedAt), row.Queue)
			case q.Workers == 0:
				return s + ": no running worker serves the queue"
			default:
				return s + fmt.Sprintf(": %d workers serve the queue; their slots are busy, or its flow control (concurrency, rate) holds the job back", q.Workers)
			}
		}
		return s
	case jobs.StateScheduled:
		steps, err := c.ListJobSteps(rctx, id)
		if err != nil {
			steps = nil
		}
		switch s := SuspensionOf(row.State, steps, time.Now()); s.Wait {
		case StepKindSleep:
			return fmt.Sprintf("job %d is sleeping until %s (a durable Sleep; WakeJob ends it now)", id, at(s.Until))
		case StepKindEvent:
			return fmt.Sprintf("job %d is awaiting the event %q until %s (EmitEvent sends it; WakeJob ends the wait now)", id, s.Event, at(s.Until))
		}
		return fmt.Sprintf("job %d is scheduled to run at %s in queue %q (after %d of %d attempts)", id, at(row.RunAt), row.Queue, row.Attempt, row.MaxAttempts)
	case jobs.StateWaiting:
		return fmt.Sprintf("job %d is waiting for the job ahead of it in its sequence, or for its workflow parents, to end", id)
	case jobs.StateRunning:
		s := fmt.Sprintf("job %d is running on worker %s (attempt %d of %d", id, row.LeaseOwner, row.Attempt, row.MaxAttempts)
		if row.LeaseUntil != nil {
			s += ", lease until " + at(*row.LeaseUntil)
		}
		return s + ")"
	}
	return fmt.Sprintf("job %d ended (%s) as the deadline passed", id, row.State)
}
