package jobs_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/hopperq/hopper/internal/testbed/testdb"
	"github.com/hopperq/hopper/jobs"
)

type MedicalRecordRequest struct {
	PatientID string `json:"patient_id"`
	Email     string `json:"email"`
}

// Encrypt a kind's payloads at rest: load 32-byte keys from a secret
// store (here, fixed hex for the example), name the current one, keep
// the older ones for the jobs they encrypted, and define the kind with
// the keyring. The database then holds an envelope that names its key;
// the unique key, derived in the process, is stored in the clear.
func ExampleEncrypted() {
	pool, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()

	k1, _ := hex.DecodeString(strings.Repeat("11", 32)) // from your secret store
	k2, _ := hex.DecodeString(strings.Repeat("22", 32))
	keyring, err := jobs.NewKeyring("2026-12", map[string][]byte{"2026-11": k1, "2026-12": k2})
	if err != nil {
		panic(err)
	}
	records := jobs.MustDefine[MedicalRecordRequest]("medical_records",
		jobs.Encrypted(keyring),
		jobs.UniqueBy(func(r MedicalRecordRequest) string { return r.PatientID }))

	res, err := records.Enqueue(ctx, pool, MedicalRecordRequest{PatientID: "p-17", Email: "ada@example.com"})
	if err != nil {
		panic(err)
	}
	var payload, uniqueKey string
	if err := pool.QueryRow(ctx, `SELECT payload::text, unique_key FROM hopper_jobs WHERE id = $1`, res.ID).Scan(&payload, &uniqueKey); err != nil {
		panic(err)
	}
	key, encrypted := jobs.EncryptedWith([]byte(payload))
	fmt.Println("encrypted:", encrypted, "with key", key)
	fmt.Println("email in the clear:", strings.Contains(payload, "ada@example.com"))
	fmt.Println("unique key:", uniqueKey)

	// A worker decodes it with the kind: here by hand.
	decoded, err := records.DecodePayload(1, []byte(payload))
	if err != nil {
		panic(err)
	}
	fmt.Println("decrypted:", decoded.Email)
	// Output:
	// encrypted: true with key 2026-12
	// email in the clear: false
	// unique key: medical_records:p-17
	// decrypted: ada@example.com
}
