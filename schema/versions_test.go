package schema_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hopperq/hopper/schema"
)

// addedBy lists, by version, the objects (as objects names them) that the
// migrations from 12 on add, so that a test of one migration's down can
// say what a schema looks like at any older version, however many
// migrations come after it. A migration that adds a second function of a
// name already there lists that name again.
var addedBy = map[uint][]string{
	12: sqlAPIObjects,
	13: sequenceObjects,
	14: workflowObjects,
	15: edgeObjects,
	16: nil, // sql_api_inputs: a check on hopper_jobs and a function's new body
	17: {"relation hopper_unique_periods", "relation hopper_unique_periods_expires_idx", "relation hopper_unique_periods_pkey"},
	18: durableObjects,
	19: nil, // history_drop_after: a column and a check on hopper_job_history
	20: nil, // history_drop_after_valid: the check validated
	21: historyPartitionObjects,
	22: nil, // dead_partition_at: a column and a check on hopper_dead_jobs
	23: nil, // dead_partition_at_valid: the check validated
	24: deadPartitionObjects,
	25: nil, // workflow_lookups: an index replaced by one of the same name, a function's new body
	26: {"function hopper_sequence_place_keys", "function hopper_sequence_place_queue"},
	27: nil, // definer_grants: grants on the partition functions
	28: nil, // meta_room: a check on hopper_jobs replaced
	29: nil, // meta_room_valid: the check validated
	30: {"relation hopper_migration_builds", "relation hopper_migration_builds_pkey"},
	31: {"relation hopper_key_limits", "relation hopper_key_limits_pkey", // key_limits; hopper_ready_keys replaced
		"relation hopper_shared_limits", "relation hopper_shared_limits_name_idx", "relation hopper_shared_limits_pkey"},
	32: nil, // replica_identity: the rate claims' log's replica identity
	33: nil, // citus_planning: seven functions redefined, nothing added
	// shard_wakes: the switch and the wake-up; six functions redefined
	34: {"function hopper_silent", "function hopper_wake"},
	35: nil, // citus_functions: hopper_workflow_retry and hopper_ready_keys redefined, nothing added
}

// deadPartitionObjects are what migration 24 (dead_partitions) adds: the
// old table stays, as the default partition, with its indexes; its
// triggers move to the parent under the same names.
var deadPartitionObjects = []string{
	"function hopper_dead_partition_at", "function hopper_dead_partitions_drop", "function hopper_dead_partitions_ensure",
	"relation hopper_dead_jobs_all_died_at_idx", "relation hopper_dead_jobs_all_kind_idx",
	"relation hopper_dead_jobs_all_unique_key_idx", "relation hopper_dead_jobs_all_workflow_idx",
	"relation hopper_dead_jobs_default",
	"relation hopper_dead_partitions", "relation hopper_dead_partitions_lower_at_key",
	"relation hopper_dead_partitions_pkey", "relation hopper_dead_partitions_upper_at_key",
}

// historyPartitionObjects are what migration 21 (history_partitions)
// adds: the old table stays, as the default partition, with its indexes.
var historyPartitionObjects = []string{
	"function hopper_history_partitions_drop", "function hopper_history_partitions_ensure",
	"relation hopper_history_partitions", "relation hopper_history_partitions_lower_at_key",
	"relation hopper_history_partitions_pkey", "relation hopper_history_partitions_upper_at_key",
	"relation hopper_job_history_all_unique_key_idx", "relation hopper_job_history_all_workflow_idx",
	"relation hopper_job_history_default",
}

// durableObjects are what migration 18 (durable) adds.
var durableObjects = []string{
	"function hopper_durable_ended", "function hopper_emit_event",
	"relation hopper_events", "relation hopper_events_age_idx", "relation hopper_events_pkey",
	"relation hopper_job_progress", "relation hopper_job_progress_pkey",
	"relation hopper_job_steps", "relation hopper_job_steps_pkey", "relation hopper_job_steps_waiting_idx",
	"trigger hopper_dead_jobs_durable_ended", "trigger hopper_jobs_durable_ended",
}

// downTo migrates down to version v, whatever the latest version is.
func downTo(ctx context.Context, t *testing.T, mg *schema.Migrator, v uint) {
	t.Helper()
	require.NoError(t, mg.Down(ctx, int(schema.Latest()-v)), "down to version %d", v)
	got, dirty, err := mg.Version()
	require.NoError(t, err)
	require.False(t, dirty)
	require.Equal(t, v, got)
}

// objectsAt is up (the objects at the latest version) without those the
// migrations after version v added (each listed name once per listing).
func objectsAt(t *testing.T, up []string, v uint) []string {
	t.Helper()
	out := slices.Clone(up)
	for version, added := range addedBy {
		if version <= v {
			continue
		}
		for _, o := range added {
			i := slices.Index(out, o)
			require.GreaterOrEqual(t, i, 0, "migration %d's %s is in the latest schema", version, o)
			out = slices.Delete(out, i, i+1)
		}
	}
	return out
}
