package shard

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hopperq/hopper/jobs"
)

// Events across shards. A job waiting for an event (worker.AwaitEvent)
// may be in any shard, and an event is kept for the jobs that wait for it
// later, so the Set emits an event in every shard, in one transaction:
// every shard has it, or none does (across nodes, Citus commits it in two
// phases). Its cost grows with the shard count: one statement per shard.

// EmitEvent is hopper.Client.EmitEvent in every shard, in one
// transaction: every job waiting for the event, whatever its shard,
// becomes pending and receives payload, and a job that waits for it later
// receives it too. It returns how many waiting jobs it woke, across
// shards, and wakes the workers of the shards where it woke one (on the
// coordinator, at commit). Errors wrap hopper.ErrInvalidEvent for a bad
// name or payload.
func (s *Set) EmitEvent(ctx context.Context, name string, payload any) (int, error) {
	return s.EmitEventTx(ctx, s.pool, name, payload)
}

// EmitEventTx is EmitEvent in the caller's transaction on the
// coordinator: the event is emitted in every shard when it commits, and
// in none when it rolls back.
func (s *Set) EmitEventTx(ctx context.Context, tx jobs.DBTX, name string, payload any) (int, error) {
	return s.emitEvent(ctx, tx, nil, name, payload)
}

// EmitEventEncrypted is hopper.Client.EmitEventEncrypted in every shard:
// EmitEvent with the payload encrypted by keyring's current key.
func (s *Set) EmitEventEncrypted(ctx context.Context, keyring *jobs.Keyring, name string, payload any) (int, error) {
	return s.EmitEventEncryptedTx(ctx, s.pool, keyring, name, payload)
}

// EmitEventEncryptedTx is EmitEventEncrypted in the caller's transaction.
func (s *Set) EmitEventEncryptedTx(ctx context.Context, tx jobs.DBTX, keyring *jobs.Keyring, name string, payload any) (int, error) {
	return s.emitEvent(ctx, tx, keyring, name, payload)
}

// emitEvent emits the event in each shard in turn, in one transaction,
// then wakes the shards where it woke jobs: a shard's own wake-up is
// silent (migration 34).
func (s *Set) emitEvent(ctx context.Context, dbtx jobs.DBTX, keyring *jobs.Keyring, name string, payload any) (int, error) {
	total := 0
	err := s.inTx(ctx, dbtx, func(tx pgx.Tx) error {
		var woke []int
		for k, c := range s.clients {
			var n int
			var err error
			if keyring != nil {
				n, err = c.EmitEventEncryptedTx(ctx, tx, keyring, name, payload)
			} else {
				n, err = c.EmitEventTx(ctx, tx, name, payload)
			}
			if err != nil {
				return fmt.Errorf("shard %s: %w", s.names[k], err)
			}
			if n > 0 {
				woke = append(woke, k)
				total += n
			}
		}
		if len(woke) == 0 {
			return nil
		}
		return s.wakeShards(ctx, tx, woke...)
	})
	if err != nil {
		return 0, err
	}
	return total, nil
}
