package dashboard_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/dashboard"
	"github.com/hopperq/hopper/internal/testbed/testfactory"
	"github.com/hopperq/hopper/jobs"
)

// TestEncryptedJobPage: a job page names an encrypted payload and an
// encrypted step result with their key, shows none of the ciphertext,
// and offers no payload edit (the dashboard has no key); the job's other
// fields stay editable.
func TestEncryptedJobPage(t *testing.T) {
	b := newBed(t, dashboard.Config{Token: token})
	_, _ = b.get("/?token=" + token)
	k := jobs.MustDefine[map[string]string]("k", jobs.Encrypted(jobs.MustKeyring("k7", map[string][]byte{"k7": make([]byte, 32)})))
	payload, err := k.EncodePayload(map[string]string{"ssn": "marker-0e9b"})
	require.NoError(t, err)
	id := testfactory.Job(b.ctx, t, b.pool, &testfactory.JobOpts{Payload: payload}).ID
	sealed, err := k.Keyring().SealStep(id, "lookup", []byte(`"marker-0e9b"`))
	require.NoError(t, err)
	testfactory.Step(b.ctx, t, b.pool, id, &testfactory.StepOpts{Name: "lookup", Result: sealed})

	status, body := b.get(fmt.Sprintf("/jobs/%d", id))
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `<pre id="payload">encrypted (key k7)</pre>`)
	require.Contains(t, body, `<td>lookup</td><td>done</td><td>—</td><td><code>encrypted (key k7)</code></td>`)
	require.Contains(t, body, `id="encrypted-note"`)
	require.NotContains(t, body, `id="edit-payload"`)
	require.Contains(t, body, `id="edit"`, "the rest stays editable")
	require.NotContains(t, body, "marker-0e9b")
	require.NotContains(t, body, "hopper.encrypted", "no envelope, no base64")

	_, body = b.get(fmt.Sprintf("/jobs/%d", b.live))
	require.Contains(t, body, `id="edit-payload"`, "a payload in the clear is editable")
}
