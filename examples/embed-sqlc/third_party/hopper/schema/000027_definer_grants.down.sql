-- PUBLIC may run the partition functions again, as before migration 27.
-- The roles granted EXECUTE by the up keep it (PUBLIC's covers them); the
-- grants it took from roles without DELETE are not given back.
GRANT EXECUTE ON FUNCTION hopper_history_partitions_ensure(interval, interval), hopper_history_partitions_drop(),
    hopper_dead_partitions_ensure(interval, interval), hopper_dead_partitions_drop(interval) TO PUBLIC;
