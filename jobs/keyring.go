package jobs

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// EnvelopeKey is the one key of the JSON object an encrypted value is
// stored as: {"hopper.encrypted": {"v": 1, "key": "k2", "nonce": "…",
// "data": "…"}}. It is a jsonb object, so the columns' checks hold, and
// it names itself: SQL finds encrypted payloads with payload ?
// 'hopper.encrypted' and their key with payload->'hopper.encrypted'->>'key'.
// Every kind's decoding looks for it, encrypted or not: a kind without a
// keyring refuses an envelope (ErrDecrypt) rather than decode it into a
// zero T. So no payload in the clear may be an object of this one key.
const EnvelopeKey = "hopper.encrypted"

// MaxKeyIDLength bounds a key id, in bytes.
const MaxKeyIDLength = 64

// envelopeVersion is the envelope's format: AES-256-GCM, a random 96-bit
// nonce, the additional data of sealContext.
const envelopeVersion = 1

// Keyring holds the keys a kind's payloads are encrypted with
// (Encrypted): each key has an id, stored in the clear with every value
// it encrypted, and one key is current, the one new values are encrypted
// with. Every key decrypts. To rotate, make a keyring with a new current
// key and the old ones still in it; drop an old key once no stored value
// uses it (hopper.Client.EncryptionKeys counts them). A Keyring is safe
// for concurrent use and never changes.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// NewKeyring makes a keyring of keys (id → 32-byte AES-256 key) whose key
// current encrypts. An id is 1 to MaxKeyIDLength bytes of letters,
// digits, '.', '_' and '-'. The key bytes are copied. Errors wrap
// ErrInvalidKeyring.
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	if _, ok := keys[current]; !ok {
		return nil, fmt.Errorf("%w: the current key %q is not among the keys", ErrInvalidKeyring, current)
	}
	r := &Keyring{current: current, aeads: make(map[string]cipher.AEAD, len(keys))}
	for _, id := range slices.Sorted(maps.Keys(keys)) {
		if !validKeyID(id) {
			return nil, fmt.Errorf("%w: key id %q: want 1 to %d letters, digits, '.', '_' or '-'", ErrInvalidKeyring, id, MaxKeyIDLength)
		}
		key := keys[id]
		if len(key) != 32 {
			return nil, fmt.Errorf("%w: key %q is %d bytes, AES-256 needs 32", ErrInvalidKeyring, id, len(key))
		}
		block, err := aes.NewCipher(bytes.Clone(key))
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrInvalidKeyring, id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrInvalidKeyring, id, err)
		}
		r.aeads[id] = aead
	}
	return r, nil
}

// MustKeyring is NewKeyring that panics on an invalid keyring, for a
// package-level kind definition.
func MustKeyring(current string, keys map[string][]byte) *Keyring {
	r, err := NewKeyring(current, keys)
	if err != nil {
		panic(err)
	}
	return r
}

// Current is the id of the key new values are encrypted with.
func (r *Keyring) Current() string { return r.current }

// KeyIDs are the ids of every key of the keyring, sorted.
func (r *Keyring) KeyIDs() []string { return slices.Sorted(maps.Keys(r.aeads)) }

func validKeyID(id string) bool {
	if id == "" || len(id) > MaxKeyIDLength {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Encrypted stores the kind's payloads encrypted with keyring's current
// key (AES-256-GCM), and decrypts them, with whichever of its keys
// encrypted them, before the upgrades and the decoding. The results a
// worker records for the kind's jobs' steps (worker.Step, worker.StepTx)
// are encrypted the same way. MaxPayloadBytes applies to the JSON in the
// clear; the stored envelope is about a third larger (base64).
//
// What stays in the clear: the kind, queue, priority, times, attempts,
// errors, metadata (and so what enqueue hooks put there), progress, and
// the keys derived from the payload in this process (UniqueBy,
// UniqueFields, KeyBy, SequenceBy): the database compares them; and a
// handler's result kept in the history (HandleWithResult), which
// workflow steps read. Payloads in the clear of the kind (enqueued before
// it was encrypted, or by `hopper enqueue` and the SQL API, which have no
// key) still run. Events are encrypted by their emitter
// (hopper.Client.EmitEventEncrypted); AwaitEvent decrypts them with the
// kind's keyring.
func Encrypted(keyring *Keyring) DefineOption {
	return func(d *definition) {
		if keyring == nil {
			d.errs = append(d.errs, errors.New("Encrypted: nil keyring"))
			return
		}
		d.keyring = keyring
	}
}

// envelope is what EnvelopeKey holds.
type envelope struct {
	V     int    `json:"v"`
	Key   string `json:"key"`
	Nonce string `json:"nonce"`
	Data  string `json:"data"`
}

type sealed struct {
	E *envelope `json:"hopper.encrypted"`
}

// Additional data binds a ciphertext to where it is stored, so that one
// moved elsewhere (another kind's payload, another job's step) fails to
// decrypt. A payload binds to its kind and payload version, not to its
// job: the id is the database's, given at the insert, after the payload
// is encrypted. Jobs of one kind and version may swap payloads unnoticed.
func payloadContext(kind string, version int) []byte {
	return sealContext("payload", kind, strconv.Itoa(version))
}

// resultContext is the additional data of a value recorded for job id:
// what (a step's name) binds it to its place. Job ids are unique across
// kinds, so the kind need not be bound.
func resultContext(id int64, what string) []byte {
	return sealContext("record", strconv.FormatInt(id, 10), what)
}

func eventContext(name string) []byte { return sealContext("event", name) }

func sealContext(parts ...string) []byte {
	b := []byte("hopper.encrypted/1")
	for _, p := range parts {
		b = append(b, 0)
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	return b
}

// seal encrypts plain (JSON) with the current key, bound to ad.
func (r *Keyring) seal(plain, ad []byte) (json.RawMessage, error) {
	aead := r.aeads[r.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	data := aead.Seal(nil, nonce, plain, ad)
	return json.Marshal(sealed{E: &envelope{V: envelopeVersion, Key: r.current,
		Nonce: base64.StdEncoding.EncodeToString(nonce), Data: base64.StdEncoding.EncodeToString(data)}})
}

// open decrypts raw when it is an envelope; anything else is returned as
// it is (a value stored in the clear). r may be nil: an envelope then
// fails with ErrDecrypt.
func (r *Keyring) open(raw json.RawMessage, ad []byte) (json.RawMessage, error) {
	e, ok := parseEnvelope(raw)
	if !ok {
		return raw, nil
	}
	if r == nil {
		return nil, fmt.Errorf("%w: encrypted with key %q, but no keyring is given for it (jobs.Encrypted)", ErrDecrypt, e.Key)
	}
	if e.V != envelopeVersion {
		return nil, fmt.Errorf("%w: envelope version %d, this build reads %d", ErrDecrypt, e.V, envelopeVersion)
	}
	aead, ok := r.aeads[e.Key]
	if !ok {
		return nil, fmt.Errorf("%w: key %q is not in the keyring (it has %q)", ErrDecrypt, e.Key, r.KeyIDs())
	}
	nonce, err1 := base64.StdEncoding.DecodeString(e.Nonce)
	data, err2 := base64.StdEncoding.DecodeString(e.Data)
	if err1 != nil || err2 != nil || len(nonce) != aead.NonceSize() {
		return nil, fmt.Errorf("%w: key %q: a malformed envelope", ErrDecrypt, e.Key)
	}
	plain, err := aead.Open(nil, nonce, data, ad)
	if err != nil {
		return nil, fmt.Errorf("%w: key %q: the ciphertext fails authentication (altered, or moved from elsewhere)", ErrDecrypt, e.Key)
	}
	return plain, nil
}

// parseEnvelope reads raw as an envelope: an object whose one key is
// EnvelopeKey.
func parseEnvelope(raw json.RawMessage) (*envelope, bool) {
	if !bytes.Contains(raw, []byte(`"`+EnvelopeKey+`"`)) {
		return nil, false // the common case, without a parse
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil || len(fields) != 1 || fields[EnvelopeKey] == nil {
		return nil, false
	}
	var e envelope
	if json.Unmarshal(fields[EnvelopeKey], &e) != nil || e.Key == "" {
		return nil, false
	}
	return &e, true
}

// EncryptedWith reports whether raw, a stored payload, step result or
// event payload, is encrypted (Encrypted), and with which key: what the
// hopper command and the dashboard show in its place.
func EncryptedWith(raw json.RawMessage) (keyID string, ok bool) {
	e, ok := parseEnvelope(raw)
	if !ok {
		return "", false
	}
	return e.Key, true
}

// SealStep encrypts raw, the result of the step named step of job id
// (worker.Step records it so for an Encrypted kind), or returns it as it
// is from a nil keyring.
func (r *Keyring) SealStep(id int64, step string, raw json.RawMessage) (json.RawMessage, error) {
	if r == nil || raw == nil {
		return raw, nil
	}
	return r.seal(raw, resultContext(id, step))
}

// OpenStep decrypts what SealStep encrypted; a value in the clear is
// returned as it is. r may be nil: an encrypted value then fails. Errors
// wrap ErrDecrypt.
func (r *Keyring) OpenStep(id int64, step string, raw json.RawMessage) (json.RawMessage, error) {
	return r.open(raw, resultContext(id, step))
}

// SealEvent encrypts an event's payload (JSON) for hopper.Client's
// EmitEventEncrypted; bound to the event's name.
func (r *Keyring) SealEvent(name string, raw json.RawMessage) (json.RawMessage, error) {
	return r.seal(raw, eventContext(name))
}

// OpenEvent decrypts what SealEvent encrypted; a payload in the clear is
// returned as it is. r may be nil (a kind not encrypted): an encrypted
// payload then fails. Errors wrap ErrDecrypt.
func (r *Keyring) OpenEvent(name string, raw json.RawMessage) (json.RawMessage, error) {
	return r.open(raw, eventContext(name))
}
