package tests

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

type Patient struct {
	Name string `json:"name"`
}

var encryptedCLIKind = jobs.MustDefine[Patient]("encrypted_cli", jobs.Defaults(jobs.Queue("encrypted")),
	jobs.Encrypted(jobs.MustKeyring("k2", map[string][]byte{"k1": make([]byte, 32), "k2": append(make([]byte, 31), 2)})))

// TestCLIEncrypted: hopper jobs show names an encrypted payload and an
// encrypted step result, with their key, and prints nothing of them in
// the clear; hopper encryption counts the values per key.
func TestCLIEncrypted(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const marker = "marker-c41d"
	w, err := worker.New(d.Pool, worker.Config{Logger: quietLog, PollInterval: 50 * time.Millisecond, Queues: map[string]int{"encrypted": 1}})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, encryptedCLIKind, func(ctx context.Context, j *jobs.Job[Patient]) error {
		if _, err := worker.Step(ctx, j, "chart", func(context.Context) (string, error) { return "chart of " + j.Payload.Name, nil }); err != nil {
			return err
		}
		return worker.Sleep(ctx, j, "rest", time.Hour)
	}))
	res, err := encryptedCLIKind.Enqueue(ctx, d.Pool, Patient{Name: marker})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(wctx) }()
	defer func() { stop(); require.NoError(t, <-errc) }()

	var r result
	testdb.WaitFor(t, "the job sleeps after its step", func() bool {
		r = runHopper(t, d.URL, "", "jobs", "show", itoa(res.ID))
		return r.code == 0 && regexp.MustCompile(`(?m)^  1\s+sleep\s+rest\s+waiting`).MatchString(r.stdout)
	})
	require.Regexp(t, `(?m)^payload: encrypted \(key k2\)$`, r.stdout)
	require.Regexp(t, `(?m)^  0\s+step\s+chart\s+done\s+-\s+encrypted \(key k2\)$`, r.stdout)
	require.NotContains(t, r.stdout, marker)

	r = runHopper(t, d.URL, "", "encryption")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^KEY\s+PLACE\s+KIND\s+VALUES\n`+
		`k2\s+payload\s+encrypted_cli\s+1\n`+
		`k2\s+step\s+encrypted_cli\s+1$`, r.stdout)
}
