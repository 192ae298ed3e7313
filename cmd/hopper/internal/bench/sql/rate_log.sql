-- The rate mode's log of claims: every row a claim adds to
-- hopper_rate_claims (its clock, the jobs it took) is copied here, where
-- no pruning removes it. A benchmark's scratch schema only.
CREATE TABLE hopper_bench_rate_log (
    claimed_at timestamptz NOT NULL,
    jobs       integer     NOT NULL
);

CREATE FUNCTION hopper_bench_log_rate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO hopper_bench_rate_log (claimed_at, jobs) VALUES (NEW.claimed_at, NEW.jobs);
    RETURN NULL;
END
$$;

CREATE TRIGGER hopper_bench_log_rate AFTER INSERT ON hopper_rate_claims
FOR EACH ROW EXECUTE FUNCTION hopper_bench_log_rate();
