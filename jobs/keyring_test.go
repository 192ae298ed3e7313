package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/jobs"
)

// key is a 32-byte test key filled with b.
func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

type secret struct {
	Email string `json:"email"`
	Plan  string `json:"plan"`
}

// TestNewKeyringRules: the keyring's rules, one a row.
func TestNewKeyringRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		current string
		keys    map[string][]byte
		ok      bool
	}{
		{"one key", "k1", map[string][]byte{"k1": key(1)}, true},
		{"two keys", "k2", map[string][]byte{"k1": key(1), "k2": key(2)}, true},
		{"current missing", "k3", map[string][]byte{"k1": key(1)}, false},
		{"no keys", "k1", nil, false},
		{"short key", "k1", map[string][]byte{"k1": key(1)[:16]}, false},
		{"long key", "k1", map[string][]byte{"k1": append(key(1), 0)}, false},
		{"empty id", "", map[string][]byte{"": key(1)}, false},
		{"id with a space", "k 1", map[string][]byte{"k 1": key(1)}, false},
		{"id over the limit", strings.Repeat("k", jobs.MaxKeyIDLength+1), map[string][]byte{strings.Repeat("k", jobs.MaxKeyIDLength+1): key(1)}, false},
		{"id at the limit", strings.Repeat("k", jobs.MaxKeyIDLength), map[string][]byte{strings.Repeat("k", jobs.MaxKeyIDLength): key(1)}, true},
		{"a bad old key", "k1", map[string][]byte{"k1": key(1), "old": key(1)[:5]}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := jobs.NewKeyring(tc.current, tc.keys)
			if !tc.ok {
				require.ErrorIs(t, err, jobs.ErrInvalidKeyring)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.current, r.Current())
			require.Len(t, r.KeyIDs(), len(tc.keys))
		})
	}
	_, err := jobs.Define[secret]("encrypted_nil", jobs.Encrypted(nil))
	require.ErrorIs(t, err, jobs.ErrInvalidDefinition)
}

// TestEncryptedPayloadRoundTrip: an encrypted kind's stored payload is an
// envelope naming its key, holds nothing of the payload in the clear,
// and decodes back; each encryption has its own nonce.
func TestEncryptedPayloadRoundTrip(t *testing.T) {
	t.Parallel()
	k := jobs.MustDefine[secret]("encrypted_round_trip", jobs.Encrypted(jobs.MustKeyring("k1", map[string][]byte{"k1": key(1)})))
	p := secret{Email: "marker-7f3a@example.com", Plan: "gold"}
	raw, err := k.EncodePayload(p)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "marker-7f3a")
	require.NotContains(t, string(raw), "gold")
	id, ok := jobs.EncryptedWith(raw)
	require.True(t, ok)
	require.Equal(t, "k1", id)
	again, err := k.EncodePayload(p)
	require.NoError(t, err)
	require.NotEqual(t, string(raw), string(again), "a fresh nonce every time")
	got, err := k.DecodePayload(1, raw)
	require.NoError(t, err)
	require.Equal(t, p, got)

	// A payload in the clear (enqueued before the kind was encrypted, or
	// by hopper enqueue) still decodes.
	got, err = k.DecodePayload(1, json.RawMessage(`{"email": "a@b", "plan": "free"}`))
	require.NoError(t, err)
	require.Equal(t, secret{Email: "a@b", Plan: "free"}, got)
	_, ok = jobs.EncryptedWith(json.RawMessage(`{"email": "a@b"}`))
	require.False(t, ok)
}

// TestEncryptedPayloadRefusals: what cannot be decrypted wraps
// ErrDecrypt and ErrUndecodable: a key no longer in the keyring, an
// altered ciphertext, a ciphertext of another kind or payload version,
// an encrypted payload given to a kind without a keyring.
func TestEncryptedPayloadRefusals(t *testing.T) {
	t.Parallel()
	old := jobs.MustKeyring("k1", map[string][]byte{"k1": key(1)})
	rotated := jobs.MustKeyring("k2", map[string][]byte{"k1": key(1), "k2": key(2)})
	dropped := jobs.MustKeyring("k2", map[string][]byte{"k2": key(2)})
	k1 := jobs.MustDefine[secret]("encrypted_refusals", jobs.Encrypted(old))
	raw, err := k1.EncodePayload(secret{Email: "x@y"})
	require.NoError(t, err)

	// Rotation: a keyring with a new current key still reads the old.
	_, err = jobs.MustDefine[secret]("encrypted_refusals", jobs.Encrypted(rotated)).DecodePayload(1, raw)
	require.NoError(t, err)

	tampered := tamper(t, raw)
	v2 := jobs.MustDefine[secret]("encrypted_refusals", jobs.Encrypted(old), jobs.Version(2),
		jobs.Upgrade(1, func(r json.RawMessage) (json.RawMessage, error) { return r, nil }))
	for _, tc := range []struct {
		name    string
		decode  func() error
		message string
	}{
		{"key dropped", func() error {
			_, err := jobs.MustDefine[secret]("encrypted_refusals", jobs.Encrypted(dropped)).DecodePayload(1, raw)
			return err
		}, `key "k1" is not in the keyring`},
		{"altered", func() error { _, err := k1.DecodePayload(1, tampered); return err }, "fails authentication"},
		{"another kind", func() error {
			_, err := jobs.MustDefine[secret]("encrypted_other", jobs.Encrypted(old)).DecodePayload(1, raw)
			return err
		}, "fails authentication"},
		{"another version", func() error { _, err := v2.DecodePayload(2, raw); return err }, "fails authentication"},
		{"no keyring", func() error {
			_, err := jobs.MustDefine[secret]("encrypted_refusals").DecodePayload(1, raw)
			return err
		}, "no keyring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode()
			require.ErrorIs(t, err, jobs.ErrDecrypt)
			require.ErrorIs(t, err, jobs.ErrUndecodable)
			require.ErrorContains(t, err, tc.message)
		})
	}
	// The version the payload was stored at is the one bound: version 1
	// upgrades to 2 after decryption.
	_, err = v2.DecodePayload(1, raw)
	require.NoError(t, err)
}

// tamper flips one bit of an envelope's ciphertext.
func tamper(t *testing.T, raw json.RawMessage) json.RawMessage {
	t.Helper()
	var env map[string]map[string]any
	require.NoError(t, json.Unmarshal(raw, &env))
	data := []byte(env[jobs.EnvelopeKey]["data"].(string))
	if data[0] == 'A' {
		data[0] = 'B'
	} else {
		data[0] = 'A'
	}
	env[jobs.EnvelopeKey]["data"] = string(data)
	out, err := json.Marshal(env)
	require.NoError(t, err)
	return out
}

// TestEncryptedKeysFromPlaintext: the keys a kind derives (UniqueFields,
// KeyBy, SequenceBy) and what enqueue hooks see come from the payload in
// the clear; the row holds them in the clear and the payload encrypted.
func TestEncryptedKeysFromPlaintext(t *testing.T) {
	b := setup(t)
	var hooked json.RawMessage
	k := jobs.MustDefine[secret]("encrypted_keys",
		jobs.Encrypted(jobs.MustKeyring("k1", map[string][]byte{"k1": key(1)})),
		jobs.UniqueFields("email"),
		jobs.KeyBy(func(s secret) string { return "plan-" + s.Plan }),
		jobs.OnEnqueue(func(_ context.Context, e *jobs.Enqueueing) error {
			hooked = e.Payload
			return nil
		}))
	p := secret{Email: "marker-91c2@example.com", Plan: "gold"}
	first, err := k.Enqueue(b.Ctx, b.Pool, p)
	require.NoError(t, err)
	require.JSONEq(t, `{"email": "marker-91c2@example.com", "plan": "gold"}`, string(hooked), "hooks see the payload in the clear")
	again, err := k.Enqueue(b.Ctx, b.Pool, secret{Email: p.Email, Plan: "free"})
	require.NoError(t, err)
	require.True(t, again.Duplicate, "UniqueFields compares the fields in the clear")
	require.Equal(t, first.ID, again.ID)

	var payload, uniqueKey, concurrencyKey string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT payload::text, unique_key, concurrency_key FROM hopper_jobs WHERE id = $1`, first.ID).
		Scan(&payload, &uniqueKey, &concurrencyKey))
	require.NotContains(t, payload, "marker-91c2")
	require.Contains(t, payload, `"hopper.encrypted"`)
	require.Contains(t, uniqueKey, "marker-91c2", "the unique key is stored in the clear")
	require.Equal(t, "plan-gold", concurrencyKey)

	// A batch (COPY for a large one) and an Entry are encrypted too.
	items := make([]jobs.Item[secret], 300)
	for i := range items {
		items[i].Payload = secret{Email: "batch-marker-4d1e", Plan: "silver"}
	}
	plain := jobs.MustDefine[secret]("encrypted_keys_batch", jobs.Encrypted(jobs.MustKeyring("k1", map[string][]byte{"k1": key(1)})))
	_, err = plain.EnqueueMany(b.Ctx, b.Pool, items)
	require.NoError(t, err)
	_, err = jobs.EnqueueBatch(b.Ctx, b.Pool, []jobs.Entry{plain.Entry(secret{Email: "batch-marker-4d1e"})})
	require.NoError(t, err)
	var clear, sealed int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FILTER (WHERE payload::text LIKE '%batch-marker%'),
		count(*) FILTER (WHERE payload ? 'hopper.encrypted') FROM hopper_jobs WHERE kind = 'encrypted_keys_batch'`).Scan(&clear, &sealed))
	require.Zero(t, clear)
	require.Equal(t, 301, sealed)
}

// BenchmarkEncodePayload: what encryption adds to encoding a small
// payload (and decoding it back), beside the same kind in the clear.
func BenchmarkEncodePayload(b *testing.B) {
	p := secret{Email: "someone@example.com", Plan: "gold"}
	for _, k := range []*jobs.Kind[secret]{
		jobs.MustDefine[secret]("bench_clear"),
		jobs.MustDefine[secret]("bench_encrypted", jobs.Encrypted(jobs.MustKeyring("k1", map[string][]byte{"k1": key(1)}))),
	} {
		b.Run(k.Name(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				raw, err := k.EncodePayload(p)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := k.DecodePayload(1, raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEncryptedReplaceAndWorkflow: a waiting job replaced by a later
// enqueue (ReplaceWaiting) takes the new payload encrypted, and the steps
// of a workflow are encrypted as single enqueues are.
func TestEncryptedReplaceAndWorkflow(t *testing.T) {
	b := setup(t)
	ring := jobs.MustKeyring("k1", map[string][]byte{"k1": key(1)})
	k := jobs.MustDefine[secret]("encrypted_replace", jobs.Encrypted(ring))
	first, err := k.Enqueue(b.Ctx, b.Pool, secret{Email: "old-marker"}, jobs.UniqueKey("u"), jobs.Delay(time.Hour))
	require.NoError(t, err)
	again, err := k.Enqueue(b.Ctx, b.Pool, secret{Email: "new-marker"}, jobs.UniqueKey("u"), jobs.Delay(time.Hour), jobs.ReplaceWaiting())
	require.NoError(t, err)
	require.True(t, again.Replaced)
	require.Equal(t, first.ID, again.ID)
	var raw []byte
	var version int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT payload, version FROM hopper_jobs WHERE id = $1`, first.ID).Scan(&raw, &version))
	require.NotContains(t, string(raw), "marker")
	got, err := k.DecodePayload(version, raw)
	require.NoError(t, err)
	require.Equal(t, "new-marker", got.Email)

	_, err = jobs.EnqueueWorkflow(b.Ctx, b.Pool, jobs.NewWorkflow("enc-wf").
		Add("a", k.Entry(secret{Email: "wf-marker"})).
		Add("b", k.Entry(secret{Email: "wf-marker"}), jobs.After("a")))
	require.NoError(t, err)
	var clear, sealed int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT count(*) FILTER (WHERE payload::text LIKE '%wf-marker%'),
		count(*) FILTER (WHERE payload ? 'hopper.encrypted') FROM hopper_jobs WHERE meta ->> 'hopper.workflow' = 'enc-wf'`).Scan(&clear, &sealed))
	require.Zero(t, clear)
	require.Equal(t, 2, sealed)
}
