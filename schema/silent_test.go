package schema_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// TestSilentSchemaSendsNoNotify: migration 34's switch. A schema as
// migrated wakes its workers as before: the insert trigger announces an
// enqueue, and a sequence's next job, promoted by its predecessor's
// delete, is announced on hopper_jobs; hopper_wake sends what it is given.
// The same schema made silent (hopper_silent returning true, as
// shard.Create's hopper_prepare_shard makes each shard) sends nothing:
// after each step a marker is sent by hand, and it is the next
// notification the listener reads.
func TestSilentSchemaSendsNoNotify(t *testing.T) {
	ctx, d := setup(t)
	require.NoError(t, schema.Up(ctx, d.Pool))
	listener, err := pgx.Connect(ctx, d.URL)
	require.NoError(t, err)
	defer listener.Close(context.WithoutCancel(ctx))
	for _, ch := range []string{"hopper_jobs", "hopper_job_ended"} {
		_, err = listener.Exec(ctx, "LISTEN "+ch)
		require.NoError(t, err)
	}
	// Other tests' schemas in the database notify on the same channels:
	// only this schema's notifications (and this test's markers and
	// payloads by hand) are read.
	mark, byHand := "marker "+d.Schema, "by hand "+d.Schema
	wait := func() *pgconn.Notification {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			n, err := listener.WaitForNotification(wctx)
			require.NoError(t, err)
			if n.Payload == mark || n.Payload == byHand {
				return n
			}
			var p map[string]any
			if json.Unmarshal([]byte(n.Payload), &p) == nil && p["schema"] == d.Schema {
				return n
			}
		}
	}
	next := func() (channel string, payload map[string]any) {
		t.Helper()
		n := wait()
		if n.Payload == mark {
			return n.Channel, nil
		}
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &payload), n.Payload)
		return n.Channel, payload
	}
	marker := func() {
		t.Helper()
		_, err := d.Pool.Exec(ctx, "SELECT pg_notify('hopper_jobs', $1)", mark)
		require.NoError(t, err)
	}
	// steps enqueue two jobs of one sequence (the first pending, the
	// second waiting), then delete the first, as an acknowledgement does,
	// which promotes the second; then call hopper_wake itself.
	steps := func(key string) (first, second int64) {
		t.Helper()
		meta := `{"hopper.sequence": "` + key + `"}`
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT id FROM hopper_enqueue('silent_test', '{}', queue => 'q1', meta => $1::jsonb)", meta).Scan(&first))
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT id FROM hopper_enqueue('silent_test', '{}', queue => 'q2', meta => $1::jsonb)", meta).Scan(&second))
		_, err := d.Pool.Exec(ctx, "DELETE FROM hopper_jobs WHERE id = $1", first)
		require.NoError(t, err)
		var state string
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT state FROM hopper_jobs WHERE id = $1", second).Scan(&state))
		require.Equal(t, "pending", state, "the sequence's next job is promoted")
		_, err = d.Pool.Exec(ctx, "SELECT hopper_wake('hopper_job_ended', $1)", byHand)
		require.NoError(t, err)
		return first, second
	}

	first, second := steps("loud")
	ch, p := next()
	require.Equal(t, "hopper_jobs", ch)
	require.Equal(t, d.Schema, p["schema"])
	require.Equal(t, "q1", p["queue"], "the insert trigger announces the first job")
	require.EqualValues(t, first, p["id"])
	ch, p = next()
	require.Equal(t, "hopper_jobs", ch)
	require.Equal(t, "q2", p["queue"], "the promotion announces the sequence's next job")
	require.EqualValues(t, second, p["id"])
	n := wait()
	require.Equal(t, "hopper_job_ended", n.Channel)
	require.Equal(t, byHand, n.Payload)
	marker()
	ch, p = next()
	require.Equal(t, "hopper_jobs", ch)
	require.Nil(t, p, "nothing more than those three")

	// Silent, as hopper_prepare_shard makes a shard.
	_, err = d.Pool.Exec(ctx, `CREATE OR REPLACE FUNCTION hopper_silent() RETURNS boolean
		LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT true $$`)
	require.NoError(t, err)
	steps("quiet")
	marker()
	ch, p = next()
	require.Equal(t, "hopper_jobs", ch)
	require.Nil(t, p, "a silent schema sends no NOTIFY: the marker comes first")
}

// TestSilentIsFalseAsMigrated: the switch is off in every schema the
// migrations make, so plain PostgreSQL notifies as before.
func TestSilentIsFalseAsMigrated(t *testing.T) {
	ctx, d := setup(t)
	require.NoError(t, schema.Up(ctx, d.Pool))
	var silent bool
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT hopper_silent()").Scan(&silent))
	require.False(t, silent)
}
