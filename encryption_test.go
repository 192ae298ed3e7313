package hopper_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper"
	"github.com/hopperq/hopper/jobs"
)

// TestUpdateJobEncryptedPayload: PayloadOf of an encrypted kind replaces
// a job's payload encrypted, and the kind decodes it; raw JSON in the
// clear is refused (TestUpdateJobRefused), an envelope given raw is not.
func TestUpdateJobEncryptedPayload(t *testing.T) {
	b := setup(t)
	k := jobs.MustDefine[map[string]string]("encrypted_edit",
		jobs.Encrypted(jobs.MustKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)})))
	res, err := k.Enqueue(b.Ctx, b.Pool, map[string]string{"to": "first"})
	require.NoError(t, err)

	row, err := b.client.UpdateJob(b.Ctx, res.ID, hopper.JobUpdate{Payload: hopper.PayloadOf(k, map[string]string{"to": "marker-2a9f"})})
	require.NoError(t, err)
	key, ok := jobs.EncryptedWith(row.Payload)
	require.True(t, ok, "stored encrypted: %s", row.Payload)
	require.Equal(t, "k1", key)
	require.NotContains(t, string(row.Payload), "marker-2a9f")
	job, err := k.Decode(row)
	require.NoError(t, err)
	require.Equal(t, "marker-2a9f", job.Payload["to"])

	// An envelope given raw (copied from elsewhere) is taken as it is.
	other, err := k.EncodePayload(map[string]string{"to": "raw"})
	require.NoError(t, err)
	row, err = b.client.UpdateJob(b.Ctx, res.ID, hopper.JobUpdate{Payload: hopper.RawPayload(json.RawMessage(other), 0)})
	require.NoError(t, err)
	job, err = k.Decode(row)
	require.NoError(t, err)
	require.Equal(t, "raw", job.Payload["to"])
}
