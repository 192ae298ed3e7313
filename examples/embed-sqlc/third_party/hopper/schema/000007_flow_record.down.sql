ALTER TABLE hopper_queues
    DROP COLUMN IF EXISTS flow_control,
    DROP COLUMN IF EXISTS flow_control_by,
    DROP COLUMN IF EXISTS flow_control_at;
