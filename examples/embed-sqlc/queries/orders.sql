-- name: CreateOrder :one
INSERT INTO orders (customer, total_cents)
VALUES (@customer::text, @total_cents::bigint)
RETURNING id;

-- name: ConfirmOrder :execrows
UPDATE orders SET confirmed_at = now() WHERE id = @id::bigint AND confirmed_at IS NULL;

-- name: GetOrder :one
SELECT * FROM orders WHERE id = @id::bigint;

-- name: OrdersWithPendingEmails :many
-- Orders and how many confirmation emails are still waiting for them: the
-- shop's own query joining Hopper's job table.
SELECT o.id, o.customer, o.confirmed_at, count(j.id) AS pending_emails
FROM orders AS o
LEFT JOIN hopper_jobs AS j
       ON j.kind = 'order_confirmation'
      AND j.state <> 'running'
      AND (j.payload->>'order_id')::bigint = o.id
GROUP BY o.id
ORDER BY o.id;
