-- Citus alters a distributed table's triggers only when told that they are
-- safe (in a distributed schema every table a trigger touches is in the
-- same schema, hence on the same node): for this transaction only.
SELECT set_config('citus.enable_unsafe_triggers', 'on', true);
