-- The sessions still connected under the durable mode worker's
-- application_name: none once its pool is closed and its backends have
-- exited (and so have reported their statistics).
SELECT count(*) FROM pg_stat_activity WHERE application_name = $1;
