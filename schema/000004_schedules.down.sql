DROP TABLE IF EXISTS hopper_schedule_versions;
DROP TABLE IF EXISTS hopper_schedules;
