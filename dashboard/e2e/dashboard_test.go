package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/internal/pgurl"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type Mail struct {
	To string `json:"to"`
}

var (
	mail   = jobs.MustDefine[Mail]("send_mail", jobs.Defaults(jobs.Queue("email"), jobs.MaxAttempts(1)))
	report = jobs.MustDefine[Mail]("nightly_report", jobs.Defaults(jobs.Queue("reports")))
)

func browser(t *testing.T) string {
	for _, p := range []string{os.Getenv("HOPPER_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium: make test installs it (.ci/debian-package.sh)")
	}
	t.Skip("no chromium: run .ci/debian-package.sh chromium /usr/bin/chromium")
	return ""
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// seed puts a job in every state into the schema: pending, scheduled,
// running (its handler holds it until the test ends), completed (kept in
// the history), dead and cancelled; and one whose payload is a script.
func seed(t *testing.T, ctx context.Context, d *testdb.DB) (dead int64) {
	pool := d.Pool
	client := hopper.NewClient(pool)
	for _, to := range []string{"ada", "<script>alert(1)</script>"} {
		_, err := report.Enqueue(ctx, pool, Mail{To: to})
		require.NoError(t, err)
	}
	_, err := report.Enqueue(ctx, pool, Mail{To: "later"}, jobs.Delay(time.Hour))
	require.NoError(t, err)
	c, err := report.Enqueue(ctx, pool, Mail{To: "cancel me"}, jobs.Delay(time.Hour))
	require.NoError(t, err)
	require.NoError(t, client.CancelJob(ctx, c.ID))
	res, err := mail.Enqueue(ctx, pool, Mail{To: "fails"})
	require.NoError(t, err)
	dead = res.ID
	_, err = mail.Enqueue(ctx, pool, Mail{To: "succeeds"})
	require.NoError(t, err)
	_, err = mail.Enqueue(ctx, pool, Mail{To: "runs long"})
	require.NoError(t, err)

	var settled atomic.Int32
	release := make(chan struct{})
	w, err := worker.New(pool, worker.Config{Queues: map[string]int{"email": 3}, PollInterval: 20 * time.Millisecond,
		OnOutcome: []worker.OutcomeHook{func(*jobs.Row, worker.Outcome, error) { settled.Add(1) }}})
	require.NoError(t, err)
	require.NoError(t, worker.Handle(w, mail, func(ctx context.Context, job *jobs.Job[Mail]) error {
		switch job.Payload.To {
		case "fails":
			return errors.New("smtp: 550 mailbox unavailable")
		case "runs long":
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}, worker.KeepHistory(time.Hour)))
	wctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(wctx) }()
	t.Cleanup(func() {
		close(release)
		stop()
		require.NoError(t, <-errc)
	})
	testdb.WaitFor(t, "one job dead, one completed, one running", func() bool {
		s, err := client.GetStats(ctx)
		require.NoError(t, err)
		return settled.Load() >= 2 && s.Total.Running == 1
	})
	return dead
}

// TestDashboardInABrowser starts `hopper ui` on a schema with jobs in
// every state and drives it in headless chromium: the overview (and its
// screenshot), a filtered jobs list, a dead job retried, a queue paused,
// the workers page, and the overview refreshing itself; the database is checked after each
// change.
func TestDashboardInABrowser(t *testing.T) {
	exe := browser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	d := testdb.New(t)
	deadID := seed(t, ctx, d)
	client := hopper.NewClient(d.Pool)

	bin := filepath.Join(t.TempDir(), "hopper")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/hopper")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	// A password in the URL (trust auth ignores it) must never be shown.
	const secret = "pw-never-shown"
	url := strings.Replace(d.URL, "://", "://root:"+secret+"@", 1)
	if strings.Contains(d.URL, "@") {
		url = d.URL // the test server's URL names its own user
	}
	port := freePort(t)
	const token = "e2e-token"
	ui := exec.CommandContext(ctx, bin, "--database-url", pgurl.WithSearchPath(url, d.Schema), "ui",
		"--addr", fmt.Sprintf("127.0.0.1:%d", port), "--token", token, "--sample-every", "100ms")
	stdout, err := ui.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	ui.Stderr = &stderr
	require.NoError(t, ui.Start())
	t.Cleanup(func() { _ = ui.Process.Kill(); _ = ui.Wait() })
	first, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, stderr.String())
	base := fmt.Sprintf("http://127.0.0.1:%d/", port)
	require.Equal(t, "Hopper dashboard: "+base+"?token="+token+"\n", first)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1280, 800),
	)...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(alloc)
	defer cancelTab()
	// The first Run starts the browser, which lives as long as the context
	// of that call: no step timeout on it.
	require.NoError(t, chromedp.Run(tab), "start chromium")
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		step, cancel := context.WithTimeout(tab, time.Minute)
		defer cancel()
		require.NoError(t, chromedp.Run(step, actions...), what)
	}

	// Some history for the charts: the depth rises while it is sampled.
	for i := range 3 {
		for range 2 {
			_, err := report.Enqueue(ctx, d.Pool, Mail{To: fmt.Sprint("batch ", i)}, jobs.Delay(time.Hour))
			require.NoError(t, err)
		}
		time.Sleep(300 * time.Millisecond) // a few samples at each depth: the picture's steps, nothing asserted on time
	}

	// The overview, and its picture.
	var overview string
	var shot []byte
	run("overview", chromedp.Navigate(base+"?token="+token), chromedp.WaitVisible("#queues"),
		chromedp.Text("#queues", &overview), chromedp.FullScreenshot(&shot, 100))
	require.Contains(t, overview, "email")
	require.Contains(t, overview, "reports")
	artefact := filepath.Join(os.TempDir(), "hopper-dashboard-overview.png")
	require.NoError(t, os.WriteFile(artefact, shot, 0o644))
	t.Logf("screenshot of the overview: %s (%d bytes)", artefact, len(shot))
	if os.Getenv("HOPPER_UPDATE_SCREENSHOT") != "" {
		require.NoError(t, os.WriteFile("../../docs/dashboard.png", shot, 0o644))
	}

	// The overview refreshes itself: a job enqueued now shows up without
	// a reload.
	for range 5 {
		_, err := report.Enqueue(ctx, d.Pool, Mail{To: "live"})
		require.NoError(t, err)
	}
	run("live refresh", chromedp.Poll(`document.querySelector('tr[data-queue="reports"] td:nth-child(2)').textContent === "7"`, nil,
		chromedp.WithPollingTimeout(30*time.Second)))

	// The jobs list, filtered to dead jobs.
	var listed string
	run("filter the jobs list", chromedp.Navigate(base+"jobs"), chromedp.WaitVisible("#filters"),
		chromedp.SetValue(`select[name="state"]`, "dead"), chromedp.Submit("#filters"),
		chromedp.WaitVisible(`td.state-dead`), chromedp.Text("#jobs tbody", &listed))
	require.Contains(t, listed, fmt.Sprint(deadID))
	require.NotContains(t, listed, "pending")

	// Open the dead job and retry it.
	var history, flash string
	run("open and retry a dead job", chromedp.Click(fmt.Sprintf(`a[href="jobs/%d"]`, deadID)),
		chromedp.WaitVisible("#retry"), chromedp.Text("ol.errors", &history),
		chromedp.Click("#retry"), chromedp.WaitVisible(".flash"), chromedp.Text(".flash", &flash))
	require.Contains(t, history, "smtp: 550 mailbox unavailable")
	require.Contains(t, flash, "Retried 1 of 1 selected job(s).")
	// The worker still serves the queue and may run (and fail) it again at
	// once: either it is live, or it ran a second time.
	testdb.WaitFor(t, "the retried job to be live again", func() bool {
		row, err := client.GetJob(ctx, deadID)
		require.NoError(t, err)
		return row.State != jobs.StateDead || row.Attempt >= 2
	})

	// Pause a queue from the overview.
	run("pause a queue", chromedp.Navigate(base), chromedp.WaitVisible("#queues"),
		chromedp.Click(`tr[data-queue="reports"] button`), chromedp.WaitVisible(".flash"), chromedp.Text(".flash", &flash))
	require.Equal(t, "Queue reports paused.", flash)
	qs, err := client.ListQueues(ctx)
	require.NoError(t, err)
	for _, q := range qs {
		require.Equal(t, q.Name == "reports", q.Paused(), q.Name)
	}

	// The workers page, from the navigation: the worker that serves the
	// queues is alive.
	var workersTable string
	run("the workers page", chromedp.Click(`nav a[href="workers"]`), chromedp.WaitVisible("#workers"),
		chromedp.Text("#workers tbody", &workersTable))
	require.Contains(t, workersTable, "alive")
	require.NotContains(t, workersTable, "gone")

	// A payload's script is shown, not run; no password anywhere.
	var payloads string
	run("escaping", chromedp.Navigate(base+"jobs?kind=nightly_report"), chromedp.WaitVisible("#jobs"), chromedp.Text("body", &payloads))
	var alerted bool
	run("no script ran", chromedp.Evaluate(`window.__alerted === true`, &alerted))
	require.False(t, alerted)
	var html string
	run("page source", chromedp.OuterHTML("html", &html))
	require.NotContains(t, html, secret)
	require.NotContains(t, first+stderr.String(), secret)
}
