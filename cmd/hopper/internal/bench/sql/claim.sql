-- A claim hands the jobs to the claimer: it returns their ids and
-- payloads, as any queue's claim must.
WITH picked AS (
    SELECT id FROM bench_baseline
    WHERE state = 'pending' AND queue = 'default'
    ORDER BY id LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
UPDATE bench_baseline AS b SET state = 'running', owner = :client_id FROM picked WHERE b.id = picked.id
RETURNING b.id, b.payload;
DELETE FROM bench_baseline WHERE owner = :client_id::text AND state = 'running';
