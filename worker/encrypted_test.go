package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type secretTask struct {
	N     int    `json:"n"`
	Email string `json:"email"`
}

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// rowText is everything stored of job id (live, dead or kept), its
// records and the events, as text: where a marker must not appear.
func (b *bundle) storedText(t *testing.T, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT
		coalesce((SELECT string_agg(j::text, ' ') FROM hopper_jobs AS j WHERE j.id = $1), '') ||
		coalesce((SELECT string_agg(d::text, ' ') FROM hopper_dead_jobs AS d WHERE d.id = $1), '') ||
		coalesce((SELECT string_agg(s::text, ' ') FROM hopper_job_steps AS s WHERE s.job_id = $1), '') ||
		coalesce((SELECT string_agg(e::text, ' ') FROM hopper_events AS e), '')`, id).Scan(&s))
	return s
}

// TestEncryptedJobRunsAndStaysEncrypted: a job of an encrypted kind runs
// with its payload decrypted; at rest its payload, its step's result and
// the event it received (emitted with EmitEventEncrypted) hold nothing of
// what they carry in the clear, and a replay decrypts the step's record.
func TestEncryptedJobRunsAndStaysEncrypted(t *testing.T) {
	b := setup(t)
	ring := jobs.MustKeyring("k1", map[string][]byte{"k1": testKey(1)})
	k := jobs.MustDefine[secretTask]("encrypted_run", jobs.Encrypted(ring))
	const marker = "marker-5b7e"
	res, err := k.Enqueue(b.Ctx, b.Pool, secretTask{N: 1, Email: marker + "@example.com"})
	require.NoError(t, err)
	stored := b.storedText(t, res.ID)
	require.NotContains(t, stored, marker)
	require.Contains(t, stored, "hopper.encrypted")

	type seen struct{ payload, step, event string }
	got := make(chan seen, 4)
	var stepRuns int
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[secretTask]) error {
			s, err := worker.Step(ctx, j, "look up", func(context.Context) (string, error) {
				stepRuns++
				return "step-" + marker, nil
			})
			if err != nil {
				return err
			}
			ev, err := worker.AwaitEvent[string](ctx, j, fmt.Sprintf("verified-%d", j.ID), time.Hour)
			if err != nil {
				return err
			}
			// A second wait holds the job, its records at rest, while
			// the test looks at them.
			if _, err := worker.AwaitEvent[string](ctx, j, fmt.Sprintf("done-%d", j.ID), time.Hour); err != nil {
				return err
			}
			got <- seen{j.Payload.Email, s, ev}
			return nil
		}))
	})
	testdb.WaitFor(t, "the job awaits its event", func() bool { return b.jobState(t, res.ID) == "scheduled" })
	client := hopper.NewClient(b.Pool)
	woken, err := client.EmitEventEncrypted(b.Ctx, ring, fmt.Sprintf("verified-%d", res.ID), "event-"+marker)
	require.NoError(t, err)
	require.Equal(t, 1, woken)
	testdb.WaitFor(t, "the job awaits its second event", func() bool { return b.records(t, res.ID) == 3 && b.jobState(t, res.ID) == "scheduled" })

	stored = b.storedText(t, res.ID)
	require.NotContains(t, stored, marker, "payload, step result and event all encrypted at rest")
	var sealedRecords int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM hopper_job_steps WHERE job_id = $1 AND result ? 'hopper.encrypted'`, res.ID).Scan(&sealedRecords))
	require.Equal(t, 2, sealedRecords, "the step's result and the event's payload")

	uses, err := client.EncryptionKeys(b.Ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []hopper.KeyUse{
		{KeyID: "k1", Place: hopper.KeyPlacePayload, Kind: "encrypted_run", Values: 1},
		{KeyID: "k1", Place: hopper.KeyPlaceStep, Kind: "encrypted_run", Values: 2},
		{KeyID: "k1", Place: hopper.KeyPlaceEvent, Kind: "", Values: 1},
	}, uses)

	_, err = client.EmitEvent(b.Ctx, fmt.Sprintf("done-%d", res.ID), "in the clear")
	require.NoError(t, err)
	s := <-got
	require.Equal(t, seen{marker + "@example.com", "step-" + marker, "event-" + marker}, s)
	require.Equal(t, 1, stepRuns, "the replays read the step's encrypted record")
	testdb.WaitFor(t, "job completed", func() bool { return b.jobState(t, res.ID) == "gone" })
}

// TestEncryptedRotation: after a new current key is added, jobs under
// the old key still run; once the old key is dropped, a job under it is
// dead at its first attempt, with the decryption's error, not retried.
func TestEncryptedRotation(t *testing.T) {
	b := setup(t)
	v1 := jobs.MustKeyring("k1", map[string][]byte{"k1": testKey(1)})
	v2 := jobs.MustKeyring("k2", map[string][]byte{"k1": testKey(1), "k2": testKey(2)})
	v3 := jobs.MustKeyring("k2", map[string][]byte{"k2": testKey(2)})
	old := jobs.MustDefine[secretTask]("encrypted_rotate", jobs.Encrypted(v1))
	rotated := jobs.MustDefine[secretTask]("encrypted_rotate", jobs.Encrypted(v2))
	dropped := jobs.MustDefine[secretTask]("encrypted_rotate", jobs.Encrypted(v3))

	a, err := old.Enqueue(b.Ctx, b.Pool, secretTask{N: 1})
	require.NoError(t, err)
	bb, err := rotated.Enqueue(b.Ctx, b.Pool, secretTask{N: 2})
	require.NoError(t, err)
	client := hopper.NewClient(b.Pool)
	uses, err := client.EncryptionKeys(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, []hopper.KeyUse{
		{KeyID: "k1", Place: hopper.KeyPlacePayload, Kind: "encrypted_rotate", Values: 1},
		{KeyID: "k2", Place: hopper.KeyPlacePayload, Kind: "encrypted_rotate", Values: 1},
	}, uses)

	ran := make(chan int, 4)
	r := start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, rotated, func(_ context.Context, j *jobs.Job[secretTask]) error {
			ran <- j.Payload.N
			return nil
		}))
	})
	require.ElementsMatch(t, []int{1, 2}, []int{<-ran, <-ran}, "both keys decrypt")
	testdb.WaitFor(t, "both completed", func() bool {
		return b.jobState(t, a.ID) == "gone" && b.jobState(t, bb.ID) == "gone"
	})
	r.stop()

	c, err := old.Enqueue(b.Ctx, b.Pool, secretTask{N: 3})
	require.NoError(t, err)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, dropped, func(_ context.Context, j *jobs.Job[secretTask]) error {
			ran <- j.Payload.N
			return nil
		}))
	})
	testdb.WaitFor(t, "the job under the dropped key is dead", func() bool { _, ok := b.dead(t, c.ID); return ok })
	d, _ := b.dead(t, c.ID)
	require.EqualValues(t, 1, d.Attempt, "dead at once, not retried")
	require.Contains(t, d.Reason, `key "k1" is not in the keyring`)
	require.Contains(t, d.Reason, jobs.ErrDecrypt.Error())
	require.Empty(t, ran)
}

// TestEncryptedTamperedFailsPermanently: a ciphertext altered in the
// table, or moved from a job of another kind, kills the job at its first
// attempt; so does a step's record altered between runs.
func TestEncryptedTamperedFailsPermanently(t *testing.T) {
	b := setup(t)
	ring := jobs.MustKeyring("k1", map[string][]byte{"k1": testKey(1)})
	k := jobs.MustDefine[secretTask]("encrypted_tamper", jobs.Encrypted(ring))
	other := jobs.MustDefine[secretTask]("encrypted_tamper_other", jobs.Encrypted(ring))
	altered, err := k.Enqueue(b.Ctx, b.Pool, secretTask{N: 1})
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `UPDATE hopper_jobs SET payload = jsonb_set(payload, '{hopper.encrypted,data}',
		to_jsonb(CASE WHEN left(payload->'hopper.encrypted'->>'data', 1) = 'A' THEN 'B' ELSE 'A' END
			|| substr(payload->'hopper.encrypted'->>'data', 2))) WHERE id = $1`, altered.ID)
	require.NoError(t, err)
	moved, err := k.Enqueue(b.Ctx, b.Pool, secretTask{N: 2})
	require.NoError(t, err)
	donor, err := other.Enqueue(b.Ctx, b.Pool, secretTask{N: 3}, jobs.Delay(time.Hour))
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `UPDATE hopper_jobs SET payload = (SELECT payload FROM hopper_jobs WHERE id = $2) WHERE id = $1`, moved.ID, donor.ID)
	require.NoError(t, err)
	stepped, err := k.Enqueue(b.Ctx, b.Pool, secretTask{N: 4}, jobs.MaxAttempts(5))
	require.NoError(t, err)

	var runs atomic.Int32
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[secretTask]) error {
			n := runs.Add(1)
			if _, err := worker.Step(ctx, j, "once", func(context.Context) (int, error) { return 42, nil }); err != nil {
				return err
			}
			if n == 1 { // alter the record between runs: the replay must refuse it
				_, err := b.Pool.Exec(ctx, `UPDATE hopper_job_steps SET result = jsonb_set(result, '{hopper.encrypted,nonce}',
					to_jsonb(CASE WHEN left(result->'hopper.encrypted'->>'nonce', 1) = 'A' THEN 'B' ELSE 'A' END
						|| substr(result->'hopper.encrypted'->>'nonce', 2))) WHERE job_id = $1`, j.ID)
				require.NoError(t, err)
				return fmt.Errorf("fail once")
			}
			return nil
		}))
	})
	for _, id := range []int64{altered.ID, moved.ID} {
		testdb.WaitFor(t, "the altered job is dead", func() bool { _, ok := b.dead(t, id); return ok })
		d, _ := b.dead(t, id)
		require.EqualValues(t, 1, d.Attempt)
		require.Contains(t, d.Reason, "fails authentication")
	}
	testdb.WaitFor(t, "the job with an altered record is dead", func() bool { _, ok := b.dead(t, stepped.ID); return ok })
	d, _ := b.dead(t, stepped.ID)
	require.EqualValues(t, 2, d.Attempt, "the replay failed for good, not retried to 5")
	require.EqualValues(t, 2, runs.Load())
	require.Contains(t, d.Reason, "fails authentication")
}

// TestEncryptedEventToAKindWithoutTheKey: an encrypted event received by
// a job whose kind has no keyring fails the job for good, at its run,
// with the decryption's error; its payload never reaches the handler.
func TestEncryptedEventToAKindWithoutTheKey(t *testing.T) {
	b := setup(t)
	k := kind(t, "encrypted_event_clear_kind")
	res, err := k.Enqueue(b.Ctx, b.Pool, Task{N: 1}, jobs.MaxAttempts(5))
	require.NoError(t, err)
	got := make(chan string, 1)
	start(t, b, worker.Config{}, func(w *worker.Worker) {
		require.NoError(t, worker.Handle(w, k, func(ctx context.Context, j *jobs.Job[Task]) error {
			v, err := worker.AwaitEvent[string](ctx, j, fmt.Sprintf("sealed-%d", j.ID), time.Hour)
			if err != nil {
				return err
			}
			got <- v
			return nil
		}))
	})
	testdb.WaitFor(t, "the job awaits its event", func() bool { return b.jobState(t, res.ID) == "scheduled" })
	ring := jobs.MustKeyring("k1", map[string][]byte{"k1": testKey(1)})
	_, err = hopper.NewClient(b.Pool).EmitEventEncrypted(b.Ctx, ring, fmt.Sprintf("sealed-%d", res.ID), "secret")
	require.NoError(t, err)
	testdb.WaitFor(t, "the job is dead", func() bool { _, ok := b.dead(t, res.ID); return ok })
	d, _ := b.dead(t, res.ID)
	require.Contains(t, d.Reason, "no keyring is given for it")
	require.Empty(t, got)
}
