-- name: AckTxTimeline :one
-- The server's timeline (the first eight hex digits of its current WAL
-- file's name). AckTx runs it in the handler's transaction, after its
-- ack: a promoted standby starts a new timeline, so a job still live
-- under a timeline other than the ack's was lost in a failover, not
-- rolled back by its handler (AckTxFates).
SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer AS timeline;

-- name: AckTxFates :many
-- What became of the rows that handlers deleted with AckTx, once their
-- handlers returned: whether each job (ids) is still live, or in the dead
-- table, and the server's timeline now. The row decides, never the
-- transaction's id: a delete undone by a savepoint's rollback leaves the
-- outer transaction committed, and an id of a transaction lost in a
-- failover is one the new primary may not have reached yet, or has since
-- given to another transaction. A committed AckTx removed the row for
-- good (ids are never reused), so a row still here was not deleted.
SELECT c.id::bigint AS id,
       EXISTS (SELECT FROM hopper_jobs AS j WHERE j.id = c.id)::boolean AS live,
       EXISTS (SELECT FROM hopper_dead_jobs AS d WHERE d.id = c.id)::boolean AS dead,
       ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer AS timeline
FROM unnest(@ids::bigint[]) AS c(id);

-- name: DefaultIsolation :one
-- The isolation level the session's transactions get by default. A worker
-- refuses to start unless it is read committed: its claim under flow
-- control runs the claim lock and the claim in one implicit transaction,
-- and only under read committed does the claim's snapshot come after the
-- lock is granted (under repeatable read or serializable the snapshot is
-- the lock statement's, taken before the wait, and misses the claims that
-- committed meanwhile).
SELECT current_setting('default_transaction_isolation')::text AS isolation;
