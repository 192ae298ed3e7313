DROP TABLE IF EXISTS hopper_workers;
