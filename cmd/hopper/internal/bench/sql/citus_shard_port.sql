-- The port of the node holding a distributed schema's job table ($1: the
-- table's qualified name), from Citus's metadata.
SELECT nodeport FROM citus_shards WHERE table_name = $1::regclass;
