package hoppertest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/hoppertest"
	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
	"github.com/hopperq/hopper/worker"
)

var sendSecretInvoice = jobs.MustDefine[Invoice]("send_secret_invoice",
	jobs.Encrypted(jobs.MustKeyring("k1", map[string][]byte{"k1": make([]byte, 32)})))

// TestEncryptedKind: the kit works with an encrypted kind: Work runs a
// handler on the payload encrypted and decrypted as a worker would (its
// steps run), and RequireEnqueued finds and decodes encrypted jobs, with
// Where filtering on the payload in the clear.
func TestEncryptedKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var got Invoice
	res := hoppertest.Work(ctx, sendSecretInvoice, func(ctx context.Context, j *jobs.Job[Invoice]) error {
		n, err := worker.Step(ctx, j, "total", func(context.Context) (int, error) { return j.Payload.Cents * 2, nil })
		got = j.Payload
		got.Cents = n
		return err
	}, Invoice{"c-9", 450})
	require.NoError(t, res.Err)
	require.Equal(t, worker.OutcomeDone, res.Outcome)
	require.Equal(t, Invoice{"c-9", 900}, got)

	pool := hoppertest.Schema(t, testdb.URL())
	_, err := sendSecretInvoice.Enqueue(ctx, pool, Invoice{"c-1", 100})
	require.NoError(t, err)
	found := hoppertest.RequireEnqueued(t, pool, sendSecretInvoice, hoppertest.Where(func(i Invoice) bool { return i.Customer == "c-1" }))
	require.Len(t, found, 1)
	require.Equal(t, 100, found[0].Payload.Cents)
}
