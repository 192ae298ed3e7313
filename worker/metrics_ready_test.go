package worker

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadiness: /readyz says ready only while the worker's last read of
// the database went through, and recently; /healthz always answers.
func TestReadiness(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &readiness{staleAfter: readyStaleAfter(15 * time.Second), now: func() time.Time { return now }}
	require.Equal(t, 45*time.Second, r.staleAfter)
	require.Equal(t, 30*time.Second, readyStaleAfter(time.Second), "at least 30s")
	probe := func() (int, string) {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(body)
	}
	code, body := probe()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "the first read of the database has not finished")

	r.record(nil)
	code, body = probe()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)

	r.record(errors.New("connection refused"))
	code, body = probe()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "the last read of the database failed: connection refused")

	r.record(nil)
	now = now.Add(46 * time.Second) // a read that hangs: none went through since
	code, body = probe()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "no read of the database went through for 46s")

	rec := httptest.NewRecorder()
	healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code)
}
