-- The server's clock, which claim times are read on.
SELECT clock_timestamp();
