package bench

import "testing"

// A pgbench 15 report of a starved 1s run (the claimers emptied the table).
const pgbench15Report = `pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: multiple scripts
scaling factor: 1
query mode: simple
number of clients: 4
number of threads: 4
maximum number of tries: 1
duration: 1 s
number of transactions actually processed: 136
number of failed transactions: 2 (1.449%)
latency average = 29.310 ms
initial connection time = 31.101 ms
tps = 136.472158 (without initial connection time)
SQL script 1: /tmp/hopper-baseline123/produce.sql
 - weight: 1 (targets 50.0% of total)
 - 39 transactions (28.7% of total, tps = 39.134930)
 - number of failed transactions: 0 (0.000%)
 - latency average = 12.451 ms
 - latency stddev = 6.687 ms
SQL script 2: /tmp/hopper-baseline123/claim.sql
 - weight: 1 (targets 50.0% of total)
 - 97 transactions (71.3% of total, tps = 97.337228)
 - number of failed transactions: 2 (2.020%)
 - latency average = 26.705 ms
 - latency stddev = 17.807 ms
`

// pgbench 13 prints no failures, and two tps lines.
const pgbench13Report = `transaction type: multiple scripts
number of transactions actually processed: 100
tps = 98.1 (including connections establishing)
tps = 100.0 (excluding connections establishing)
SQL script 1: produce.sql
 - weight: 1 (targets 50.0% of total)
 - 40 transactions (40.0% of total, tps = 40.000000)
SQL script 2: claim.sql
 - weight: 1 (targets 50.0% of total)
 - 60 transactions (60.0% of total, tps = 60.000000)
`

func TestParsePgbench(t *testing.T) {
	r := parsePgbench(pgbench15Report)
	if !r.parsed || r.failed != 2 {
		t.Fatalf("parsed %v failed %d", r.parsed, r.failed)
	}
	if p, c := r.scripts["produce.sql"], r.scripts["claim.sql"]; p.transactions != 39 || p.failed != 0 || c.transactions != 97 || c.failed != 2 {
		t.Fatalf("scripts %+v", r.scripts)
	}
	if r.seconds < 0.99 || r.seconds > 1.01 {
		t.Fatalf("seconds %v, want about 1", r.seconds)
	}

	r = parsePgbench(pgbench13Report)
	if !r.parsed || r.scripts["produce.sql"].transactions != 40 || r.scripts["claim.sql"].transactions != 60 || r.seconds != 1 {
		t.Fatalf("pgbench 13: %+v", r)
	}

	for _, out := range []string{"", "pgbench: error: connection to server failed", "SQL script 1: produce.sql\n - weight: 1\n"} {
		if r := parsePgbench(out); r.parsed || r.seconds != 0 {
			t.Fatalf("%q: %+v", out, r)
		}
	}
}

func TestCheckOutcomes(t *testing.T) {
	for _, c := range []struct {
		enqueued, completed, unconfirmed, live, dead int64
		ok                                           bool
	}{
		{100, 90, 0, 6, 4, true},  // exact
		{100, 89, 2, 6, 4, true},  // one unconfirmed result committed, one did not
		{100, 88, 2, 6, 4, true},  // both committed
		{100, 87, 2, 6, 4, false}, // a job gone unreported: lost
		{100, 91, 0, 6, 4, false}, // a completion reported for a job still there
		{100, 91, 5, 6, 4, false}, // unconfirmed results cannot excuse that
		{10, 0, 0, 10, 0, true},   // nothing done
		{10, 0, 0, 0, 10, true},   // everything dead
		{10, 0, 3, 10, 0, true},   // no unconfirmed result committed
		{10, 10, 0, 0, 0, true},   // everything done
		{10, 9, 0, 0, 0, false},   // one lost
		{10, 9, 1, 0, 0, true},    // its result unconfirmed
	} {
		done, err := CheckOutcomes(c.enqueued, c.completed, c.unconfirmed, c.live, c.dead)
		if (err == nil) != c.ok || done != c.enqueued-c.live-c.dead {
			t.Errorf("%+v: done %d, err %v", c, done, err)
		}
	}
}
