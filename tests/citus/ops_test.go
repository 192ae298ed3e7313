package citus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/internal/testbed/citusbed"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/shard"
	"github.com/hopperq/hopper/tests/internal/bed"
)

// TestCitusShardedOperations: what an operator uses on a sharded Hopper,
// on one formation with three shards: the hopper command's --sharded
// job commands (by id on the shard the id names, lists and stats across
// shards, and their errors off a sharded Hopper), the sharded dashboard
// (dashboard.NewSharded on a shard.Set), and the Set's Prometheus
// collector of queue depths per shard and in total.
func TestCitusShardedOperations(t *testing.T) {
	testdb.Slow(t, "starts a Citus formation: a coordinator and two worker nodes")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, remove, err := bed.BuildHopper(".")
	require.NoError(t, err)
	defer remove()
	hopperCmd := func(t *testing.T, dbURL string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "HOPPER_READ_URL=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return stdout.String(), stderr.String(), code
	}

	t.Run("PlainPostgreSQLRefused", func(t *testing.T) {
		plain := testdb.New(t)
		_, stderr, code := hopperCmd(t, plain.URL, "jobs", "list", "--sharded")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "hopper jobs: --sharded: shards: not a Citus coordinator")
		require.Contains(t, stderr, "drop --sharded")
		_, stderr, code = hopperCmd(t, plain.URL, "--schema", plain.Schema, "stats", "--sharded")
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, "--sharded takes no --schema")
	})

	f := citusbed.New(t)
	pool := coordinatorPool(t, ctx, f)
	_, stderr, code := hopperCmd(t, f.URL(), "jobs", "list", "--sharded")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "no shard directory: run shard.Create (hopper shards create --count N)")

	set, err := shard.Create(ctx, pool, shard.Options{Count: 3})
	require.NoError(t, err)
	names := set.Names()
	// Two jobs in every shard (by routing keys the test finds), one of
	// them due in an hour.
	byShard := map[string][]int64{}
	for i := 0; len(byShard) < 3 || len(byShard[names[0]]) < 2 || len(byShard[names[1]]) < 2 || len(byShard[names[2]]) < 2; i++ {
		key := fmt.Sprintf("k%d", i)
		s := set.ShardOfKey(key)
		if len(byShard[s]) == 2 {
			continue
		}
		var opts []jobs.EnqueueOption
		if len(byShard[s]) == 1 {
			opts = append(opts, jobs.Delay(time.Hour))
		}
		res, err := shard.EnqueueRouted(ctx, set, pool, key, chore, bed.Chore{N: i}, opts...)
		require.NoError(t, err)
		require.Equal(t, s, set.ShardOfID(res.ID))
		byShard[s] = append(byShard[s], res.ID)
	}

	t.Run("CLI", func(t *testing.T) {
		out, stderr, code := hopperCmd(t, f.URL(), "jobs", "list", "--sharded", "--json")
		require.Zero(t, code, stderr)
		var page struct {
			Jobs []jobs.Row `json:"jobs"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &page))
		require.Len(t, page.Jobs, 6, "every shard's jobs")
		for i := 1; i < len(page.Jobs); i++ {
			require.Greater(t, page.Jobs[i-1].ID, page.Jobs[i].ID, "by id, highest first")
		}

		out, stderr, code = hopperCmd(t, f.URL(), "jobs", "list", "--sharded", "--limit", "4")
		require.Zero(t, code, stderr)
		require.Contains(t, out, "SHARD")
		more := regexp.MustCompile(`more: (hopper .*)`).FindStringSubmatch(out)
		require.NotNil(t, more, out)
		require.Contains(t, more[1], "--sharded", "the next page's command keeps --sharded")
		args := strings.Fields(more[1])[1:]
		out, stderr, code = hopperCmd(t, f.URL(), args...)
		require.Zero(t, code, stderr)
		require.Equal(t, 2+1, strings.Count(out, "\n"), "the last two jobs and the header: %s", out)

		id := byShard[names[2]][0]
		out, stderr, code = hopperCmd(t, f.URL(), "jobs", "show", strconv.FormatInt(id, 10), "--sharded")
		require.Zero(t, code, stderr)
		require.True(t, strings.HasPrefix(out, "shard "+names[2]+"\njob "+strconv.FormatInt(id, 10)+" "), out)

		later := byShard[names[1]][1]
		out, stderr, code = hopperCmd(t, f.URL(), "jobs", "edit", strconv.FormatInt(later, 10), "--priority", "3", "--sharded")
		require.Zero(t, code, stderr)
		require.Contains(t, out, "priority 3")

		out, stderr, code = hopperCmd(t, f.URL(), "stats", "--sharded", "--json")
		require.Zero(t, code, stderr)
		var report struct {
			Queues []struct {
				Ready     int64 `json:"ready"`
				Scheduled int64 `json:"scheduled"`
				Workers   int   `json:"workers"`
			} `json:"queues"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &report))
		require.Len(t, report.Queues, 1)
		require.Equal(t, int64(3), report.Queues[0].Ready, "added up over the shards")
		require.Equal(t, int64(3), report.Queues[0].Scheduled)

		out, stderr, code = hopperCmd(t, f.URL(), "jobs", "cancel", strconv.FormatInt(id, 10), strconv.FormatInt(later, 10), "--sharded")
		require.Zero(t, code, stderr)
		require.Contains(t, out, fmt.Sprintf("job %d: cancelled (it was pending)", id))
		require.Contains(t, out, fmt.Sprintf("job %d: cancelled (it was scheduled)", later))
		out, stderr, code = hopperCmd(t, f.URL(), "dead", "list", "--sharded")
		require.Zero(t, code, stderr)
		require.Contains(t, out, names[2])
		require.Contains(t, out, names[1])

		_, stderr, code = hopperCmd(t, f.URL(), "jobs", "show", "999999", "--sharded")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "no job 999999")
	})

	t.Run("Dashboard", func(t *testing.T) {
		d, err := dashboard.NewSharded(dashboard.ShardedConfig{Set: set,
			Config: dashboard.Config{DB: pool, Token: "tok", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
		require.NoError(t, err)
		srv := httptest.NewServer(d)
		defer srv.Close()
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		get := func(path string) (*http.Response, string) {
			res, err := client.Get(srv.URL + path)
			require.NoError(t, err)
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			require.NoError(t, err)
			return res, string(body)
		}
		res, body := get("/")
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		status, err := set.ListShardStatus(ctx)
		require.NoError(t, err)
		for _, s := range status {
			require.Contains(t, body, `<a href="s/`+s.Shard+`/">`+s.Shard+`</a></td><td>`+strconv.Itoa(s.Position)+`</td><td>`+s.Node+`</td>`)
		}
		id := byShard[names[0]][0]
		res, _ = get("/find?id=" + strconv.FormatInt(id, 10))
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		jobPage := fmt.Sprintf("/s/%s/jobs/%d", names[0], id)
		require.Equal(t, "."+jobPage, res.Header.Get("Location"))

		// A cancel from the shard's page goes through the set.
		res, _ = get("/?token=tok")
		require.Equal(t, http.StatusSeeOther, res.StatusCode)
		res, body = get(jobPage)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
		require.NotNil(t, csrf)
		post, err := client.PostForm(srv.URL+jobPage+"/cancel", url.Values{"csrf": {csrf[1]}})
		require.NoError(t, err)
		_ = post.Body.Close()
		require.Equal(t, http.StatusSeeOther, post.StatusCode)
		row, err := set.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobs.StateCancelled, row.State)
	})

	t.Run("Collector", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(set.Collector(shard.CollectorOptions{})))
		families, err := reg.Gather()
		require.NoError(t, err)
		values := map[string]float64{} // name{labels} → value
		for _, mf := range families {
			for _, m := range mf.GetMetric() {
				values[mf.GetName()+labels(m)] = m.GetGauge().GetValue()
			}
		}
		depths, err := set.ListShardQueueDepths(ctx, 0)
		require.NoError(t, err)
		var ready, scheduled float64
		for _, d := range depths {
			require.Equal(t, float64(d.Ready), values[fmt.Sprintf("hopper_queue_depth{queue=%s,shard=%s,state=ready}", d.Queue, d.Shard)])
			require.Equal(t, float64(d.Scheduled), values[fmt.Sprintf("hopper_queue_depth{queue=%s,shard=%s,state=scheduled}", d.Queue, d.Shard)])
			ready += float64(d.Ready)
			scheduled += float64(d.Scheduled)
		}
		stats, err := set.GetStats(ctx)
		require.NoError(t, err)
		require.Equal(t, float64(stats.Total.Ready), ready, "the shards' depths are their counts")
		require.Equal(t, ready, values["hopper_sharded_queue_depth{queue=default,state=ready}"])
		require.Equal(t, scheduled, values["hopper_sharded_queue_depth{queue=default,state=scheduled}"])
		for _, name := range names {
			require.Equal(t, 1.0, values["hopper_shard_up{shard="+name+"}"])
		}
	})
}

// labels is a metric's labels as {a=x,b=y}, sorted by name (as the
// registry gathers them).
func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return "{" + strings.Join(parts, ",") + "}"
}
