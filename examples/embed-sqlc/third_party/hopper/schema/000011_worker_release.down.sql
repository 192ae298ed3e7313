ALTER TABLE hopper_workers DROP COLUMN IF EXISTS released_at;
