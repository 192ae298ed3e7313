-- Run inside a REPEATABLE READ transaction: takes the snapshot that the
-- transaction then holds, as a long report or an idle-in-transaction
-- session would.
SELECT count(*) FROM hopper_jobs;
