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
