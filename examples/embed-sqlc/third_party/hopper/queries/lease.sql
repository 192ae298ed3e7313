-- name: Extend :many
-- Pushes the lease of each still-held claim (ids[i], attempts[i]) to
-- now() + lease_ms and returns the claims still held. A claim missing from
-- the answer has been lost (swept or claimed again): its handler must stop.
UPDATE hopper_jobs AS j
SET lease_until = now() + '1 millisecond'::interval * @lease_ms::bigint
FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt) AS held
WHERE j.id = held.id
  AND j.attempt = held.attempt
  AND j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
RETURNING j.id, j.attempt;

-- name: Release :many
-- Gives claims back at once, for example on shutdown: the jobs become
-- pending again, keeping their place in line. The claim is not charged:
-- attempt stays as it is (it is the fencing token and never goes down) and
-- max_attempts grows by one, so the job keeps every retry it had.
UPDATE hopper_jobs AS j
SET state        = 'pending',
    lease_owner  = NULL,
    lease_until  = NULL,
    max_attempts = j.max_attempts + 1
FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt) AS held
WHERE j.id = held.id
  AND j.attempt = held.attempt
  AND j.lease_until IS NOT NULL -- running; see AckBatch for the spelling
RETURNING j.id, j.queue;

-- name: ReleaseOwner :many
-- Gives back every claim still held by owner, uncharged as in Release. A
-- worker with a stable identity runs it at start, so the jobs of its crashed
-- previous incarnation need not wait for their leases to expire. A zombie
-- incarnation is still fenced out: attempt does not go down.
UPDATE hopper_jobs AS j
SET state        = 'pending',
    lease_owner  = NULL,
    lease_until  = NULL,
    max_attempts = j.max_attempts + 1
WHERE j.state = 'running'
  AND j.lease_owner = @owner::text
RETURNING j.id, j.queue;
