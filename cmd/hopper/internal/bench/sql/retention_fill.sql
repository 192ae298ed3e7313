-- The retention mode's history: $1 rows kept, of which $2 expired in the
-- hour before the current one (the rest expire from the next hour on,
-- over 23 hours), with a
-- typical payload and a unique key on one row in ten. $3 true: each row
-- in the partition that covers its keep_until (drop_after = keep_until);
-- false: all in the default partition (drop_after NULL), as a history
-- without partitions keeps them.
INSERT INTO hopper_job_history (id, queue, kind, version, payload, priority, attempt, max_attempts, errors,
                                run_at, created_at, finished_at, keep_until, unique_key, drop_after)
SELECT g, 'default', 'bench.kept', 1, '{"order": 123456, "note": "a payload of a typical size for a job"}', 0, 1, 25, '[]',
       now(), now(), now(), k.until,
       CASE WHEN g % 10 = 0 THEN 'bench-' || g END,
       CASE WHEN $3::boolean THEN k.until END
FROM generate_series(1, $1::bigint) AS g
CROSS JOIN (SELECT to_timestamp(floor(extract(epoch FROM now()) / 3600) * 3600) AS hour) AS h -- the hour's start, as the partitions' grid
CROSS JOIN LATERAL (
    SELECT CASE WHEN g <= $2::bigint
                THEN h.hour - interval '1 hour' + ((g - 1) * 3600000 / $2::bigint) * interval '1 millisecond'
                ELSE h.hour + interval '1 hour' + ((g - $2::bigint) * 82800000 / ($1::bigint - $2::bigint + 1)) * interval '1 millisecond'
           END AS until
) AS k;
