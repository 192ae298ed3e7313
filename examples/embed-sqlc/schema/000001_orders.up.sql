-- The shop's own tables. Hopper's tables live in a schema of their own,
-- installed by Hopper's migrations (see shop.Migrate).
CREATE TABLE orders (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer     text        NOT NULL,
    total_cents  bigint      NOT NULL CHECK (total_cents >= 0),
    confirmed_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);
