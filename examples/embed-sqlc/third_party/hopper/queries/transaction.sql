-- name: AckTxMark :one
-- What AckTx notes, in the handler's transaction after its ack, for
-- AckTxFates to read once the handler returns: the server's timeline (the
-- first eight hex digits of its current WAL file's name; a promoted
-- standby starts a new one) and the transaction's id. A job still live
-- under a timeline other than the ack's was lost in a failover, not
-- rolled back by its handler; a job gone whose ack transaction aborted
-- was ended by another run (its claim was taken while this one ran).
SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer AS timeline,
       pg_current_xact_id()::text::bigint AS xact;

-- name: AckTxFates :many
-- What became of the rows that handlers deleted with AckTx, once their
-- handlers returned: whether each job (ids) is still live, or in the dead
-- table, the status of the ack's transaction (xacts, parallel to ids:
-- 'committed', 'aborted', 'in progress', or NULL when too old to say), and
-- the server's timeline now. The row decides first: a delete undone by a
-- savepoint's rollback leaves the outer transaction committed, so a row
-- still here was not deleted, whatever the transaction did. A row gone
-- was deleted by the ack, or, when the ack's transaction aborted, by
-- another run that took the job since. An id of a transaction lost in a
-- failover is one the new primary may not have reached yet, or has since
-- given to another transaction: the caller trusts the status only on the
-- ack's timeline.
SELECT c.id::bigint AS id,
       EXISTS (SELECT FROM hopper_jobs AS j WHERE j.id = c.id)::boolean AS live,
       EXISTS (SELECT FROM hopper_dead_jobs AS d WHERE d.id = c.id)::boolean AS dead,
       coalesce(pg_xact_status(c.xact::text::xid8), '')::text AS xact_status,
       ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer AS timeline
FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@xacts::bigint[]) AS xact) AS c;

-- name: DefaultIsolation :one
-- The isolation level the session's transactions get by default. A worker
-- refuses to start unless it is read committed: its claim under flow
-- control runs the claim lock and the claim in one implicit transaction,
-- and only under read committed does the claim's snapshot come after the
-- lock is granted (under repeatable read or serializable the snapshot is
-- the lock statement's, taken before the wait, and misses the claims that
-- committed meanwhile).
SELECT current_setting('default_transaction_isolation')::text AS isolation;
