DROP TABLE IF EXISTS hopper_unique_periods;
