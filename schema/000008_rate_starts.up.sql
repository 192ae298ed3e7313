-- Rate limits with ExactStarts count a claim from the moment its last
-- handler started: the worker moves the claim's rows in the rate log to
-- then (RateClaimStarted). Until it has, awaiting_starts is true, and the
-- claim counts against the limit even once its window has passed (up to a
-- grace of five seconds, for a worker that died before it could move it):
-- a later claim never takes budget whose handlers may still be starting.
ALTER TABLE hopper_rate_claims
    ADD COLUMN awaiting_starts boolean NOT NULL DEFAULT false;
