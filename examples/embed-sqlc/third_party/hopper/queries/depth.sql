-- name: QueueDepths :many
-- Each queue's depth, cheaply enough to poll several times a second: its
-- ready jobs (pending and due), scheduled jobs and running jobs, and the
-- age of its oldest ready job, for the queues named in queues or, when
-- queues is empty, for every queue known (in hopper_queues, with pending
-- jobs, or among the scheduled and running entries read). Every count
-- reads at most scan_limit index entries (the caller's cap plus one), so
-- its cost does not grow with the table:
--
-- - ready: the queue's range of hopper_jobs_ready_idx, an index-only scan
--   of at most scan_limit entries (ready = scan_limit: there are more than
--   the cap);
-- - scheduled and running: hopper_jobs_scheduled_idx and
--   hopper_jobs_lease_idx carry no queue, so the first scan_limit entries
--   of each (all queues, in run_at and lease_until order) are read once
--   and counted per queue. When scheduled_scanned (running_scanned) is
--   scan_limit, entries were left unread and each queue's count is a
--   lower bound; below it, the counts are exact;
-- - oldest ready: one index descent per priority (0 to 9) in the queue's
--   range of the ready index;
-- - every queue (queues empty): hopper_queues, and a skip scan of the
--   ready index, one descent per queue with pending jobs.
--
-- A pending job whose run_at is still to come (only a COPY with an
-- explicit run_at writes one) counts as neither ready nor scheduled.
WITH RECURSIVE pending_queues (queue) AS (
    (SELECT j.queue FROM hopper_jobs AS j
     WHERE j.state = 'pending' AND cardinality(@queues::text[]) = 0
     ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM hopper_jobs AS j
            WHERE j.state = 'pending' AND j.queue > p.queue
            ORDER BY j.queue LIMIT 1)
    FROM pending_queues AS p
    WHERE p.queue IS NOT NULL
), scheduled AS MATERIALIZED (
    SELECT j.queue FROM hopper_jobs AS j
    WHERE j.state = 'scheduled'
    ORDER BY j.run_at
    LIMIT @scan_limit::integer
), running AS MATERIALIZED (
    SELECT j.queue FROM hopper_jobs AS j
    WHERE j.state = 'running'
    ORDER BY j.lease_until
    LIMIT @scan_limit::integer
), scheduled_counts AS (
    SELECT s.queue, count(*) AS jobs FROM scheduled AS s GROUP BY s.queue
), running_counts AS (
    SELECT r.queue, count(*) AS jobs FROM running AS r GROUP BY r.queue
), names AS (
    SELECT n.queue FROM unnest(@queues::text[]) AS n(queue)
    UNION
    SELECT q.name FROM hopper_queues AS q WHERE cardinality(@queues::text[]) = 0
    UNION
    SELECT p.queue FROM pending_queues AS p WHERE p.queue IS NOT NULL
    UNION
    SELECT s.queue FROM scheduled_counts AS s WHERE cardinality(@queues::text[]) = 0
    UNION
    SELECT r.queue FROM running_counts AS r WHERE cardinality(@queues::text[]) = 0
)
SELECT n.queue::text AS queue,
       ready.jobs::bigint AS ready,
       coalesce(sc.jobs, 0)::bigint AS scheduled,
       (SELECT count(*) FROM scheduled)::bigint AS scheduled_scanned,
       coalesce(rc.jobs, 0)::bigint AS running,
       (SELECT count(*) FROM running)::bigint AS running_scanned,
       coalesce(extract(epoch FROM now() - oldest.run_at), 0)::float8 AS oldest_ready_seconds
FROM names AS n
CROSS JOIN LATERAL (
    SELECT count(*) AS jobs
    FROM (SELECT j.id FROM hopper_jobs AS j
          WHERE j.queue = n.queue AND j.state = 'pending' AND j.run_at <= now()
          ORDER BY j.priority, j.run_at, j.id
          LIMIT @scan_limit::integer) AS r
) AS ready
CROSS JOIN LATERAL (
    SELECT min(first.run_at) AS run_at
    FROM generate_series(0, 9) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT j.run_at FROM hopper_jobs AS j
        WHERE j.queue = n.queue AND j.state = 'pending' AND j.priority = p.priority AND j.run_at <= now()
        ORDER BY j.run_at
        LIMIT 1
    ) AS first
) AS oldest
LEFT JOIN scheduled_counts AS sc ON sc.queue = n.queue
LEFT JOIN running_counts AS rc ON rc.queue = n.queue
ORDER BY 1;
