-- Sequences (migration 13): jobs sharing meta's "hopper.sequence" run one
-- at a time, in id order. The placement and the promotion are the
-- triggers' (hopper_jobs_sequence_place, hopper_jobs_sequence_advance);
-- these statements are the operator's view and hand.

-- name: ListBlockedSequences :many
-- Blocked sequences in key order (bytewise), up to max_keys after
-- after_key ('' for the first page): the dead or cancelled head that
-- blocks each, why, since when, and how many jobs wait behind it (counted
-- up to count_limit: waiting_capped says the count reached it, and more
-- may wait).
SELECT b.sequence_key, b.job_id, b.queue, b.kind, b.state, b.reason, b.blocked_at,
       w.waiting, (w.waiting >= @count_limit::integer)::boolean AS waiting_capped
FROM hopper_sequence_blocks AS b
CROSS JOIN LATERAL (
    SELECT count(*)::bigint AS waiting
    FROM (SELECT FROM hopper_jobs AS j
          WHERE (j.meta ->> 'hopper.sequence') = b.sequence_key AND j.state = 'waiting'
          LIMIT @count_limit::integer) AS c
) AS w
WHERE b.sequence_key > @after_key::text
ORDER BY b.sequence_key
LIMIT @max_keys::integer;

-- name: GetSequence :one
-- One sequence: its head (the job that is pending, scheduled or running;
-- head_id 0 when none), its block (blocked_by 0 when none) and how many
-- jobs wait (capped as in ListBlockedSequences).
SELECT coalesce(h.id, 0)::bigint AS head_id, coalesce(h.state, '')::text AS head_state,
       coalesce(b.job_id, 0)::bigint AS blocked_by, coalesce(b.state, '')::text AS blocked_state,
       coalesce(b.reason, '')::text AS blocked_reason, b.blocked_at,
       w.waiting, (w.waiting >= @count_limit::integer)::boolean AS waiting_capped
FROM (SELECT 1) AS one
LEFT JOIN hopper_jobs AS h
       ON (h.meta ->> 'hopper.sequence') = @sequence_key::text AND h.state <> 'waiting' AND h.meta ? 'hopper.sequence'
LEFT JOIN hopper_sequence_blocks AS b ON b.sequence_key = @sequence_key::text
CROSS JOIN LATERAL (
    SELECT count(*)::bigint AS waiting
    FROM (SELECT FROM hopper_jobs AS j
          WHERE (j.meta ->> 'hopper.sequence') = @sequence_key::text AND j.state = 'waiting'
          LIMIT @count_limit::integer) AS c
) AS w;

-- name: SkipSequence :one
-- Skips a blocked sequence's dead or cancelled head: the block is lifted
-- and the next job becomes the head (promoted: its id, or NULL when none
-- waits); the head stays where it is (dead or cancelled). skipped is false
-- when the key was not blocked: nothing changed.
SELECT coalesce(s.skipped, false)::boolean AS skipped, s.promoted FROM hopper_sequence_skip(@sequence_key::text) AS s;
