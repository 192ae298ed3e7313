ALTER TABLE hopper_rate_claims
    DROP COLUMN IF EXISTS awaiting_starts;
