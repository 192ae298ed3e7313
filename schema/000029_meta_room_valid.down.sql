-- Nothing to undo: a validated check is the same check.
SELECT 1;
