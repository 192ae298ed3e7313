-- name: TransactionID :one
-- The id of the caller's transaction (assigning one if it has none yet).
-- AckTx runs it in the handler's transaction, after its ack: the worker
-- later asks TransactionStatuses whether that transaction committed,
-- instead of guessing from the row's absence (an operator's cancel also
-- removes a running job's row).
SELECT pg_current_xact_id()::text::bigint AS xid;

-- name: TransactionStatuses :many
-- Whether each transaction of xids committed: 'committed', 'aborted', 'in
-- progress', or empty when the server no longer knows (a transaction older
-- than the commit log it keeps).
SELECT x.xid::bigint AS xid,
       coalesce(pg_xact_status(x.xid::text::xid8), '')::text AS status
FROM unnest(@xids::bigint[]) AS x(xid);

-- name: DefaultIsolation :one
-- The isolation level the session's transactions get by default. A worker
-- refuses to start unless it is read committed: its claim under flow
-- control runs the claim lock and the claim in one implicit transaction,
-- and only under read committed does the claim's snapshot come after the
-- lock is granted (under repeatable read or serializable the snapshot is
-- the lock statement's, taken before the wait, and misses the claims that
-- committed meanwhile).
SELECT current_setting('default_transaction_isolation')::text AS isolation;
