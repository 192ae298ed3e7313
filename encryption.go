package hopper

import (
	"context"
	"fmt"

	"github.com/hopperq/hopper/jobs"
)

// Where an encrypted value is stored, as KeyUse.Place says.
const (
	// KeyPlacePayload: a job's payload, live, dead or kept in the history.
	KeyPlacePayload = "payload"
	// KeyPlaceStep: a durable step's recorded result, or the payload an
	// event brought to a job that awaited it.
	KeyPlaceStep = "step"
	// KeyPlaceEvent: an emitted event's payload (EmitEventEncrypted).
	KeyPlaceEvent = "event"
)

// KeyUse counts the stored values one key encrypted (jobs.Encrypted) in
// one place, for one kind.
type KeyUse struct {
	// KeyID is the key's id, as the keyring names it.
	KeyID string
	// Place is KeyPlacePayload, KeyPlaceStep or KeyPlaceEvent.
	Place string
	// Kind is the kind of the job the values belong to; "" for events,
	// which belong to no job, and for steps of jobs no longer kept.
	Kind string
	// Values counts them.
	Values int64
}

// EncryptionKeys counts the stored values each encryption key encrypted,
// by key, place and kind: a key that no longer appears can be dropped from
// its keyring (jobs.NewKeyring) once no process still encrypts with it.
// It reads the job, dead, history, step and event tables whole: an
// operator's call, to make before a rotation's last step, not one for a
// hot loop.
func (c *Client) EncryptionKeys(ctx context.Context) ([]KeyUse, error) {
	return c.EncryptionKeysTx(ctx, c.db)
}

// EncryptionKeysTx is EncryptionKeys on the caller's transaction.
func (c *Client) EncryptionKeysTx(ctx context.Context, tx jobs.DBTX) ([]KeyUse, error) {
	found, err := c.queries(tx).EncryptionKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("encryption keys: %w", err)
	}
	out := make([]KeyUse, len(found))
	for i, r := range found {
		out[i] = KeyUse{KeyID: r.KeyID, Place: r.Place, Kind: r.Kind, Values: r.Values}
	}
	return out, nil
}
