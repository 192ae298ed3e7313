# Hopper's tasks. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

SQLC := CGO_ENABLED=0 go tool -modfile=tools/go.mod sqlc
# TIMED LABEL COMMAND runs COMMAND and, under .ci/run, records its wall time.
TIMED := bash .ci/timed.sh
SCRATCH := .tmp/check-generated

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## run the demo (one producer, three workers, 30s) on the default database
	go run ./cmd/hopper demo

.PHONY: build
build: ## build the hopper CLI into bin/
	go build -o bin/hopper ./cmd/hopper

.PHONY: chaos
chaos: ## the reliability suite at full size, PostgreSQL restart and 10 minutes of poison included (run it alone: it restarts the server)
	HOPPER_CHAOS=full HOPPER_CHAOS_RESTART=1 HOPPER_POISON=full go test -count=1 -v -run 'Chaos|Poison' -timeout 60m ./tests/chaos 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|chaos_test.go|poison_|Error:|Messages:|× like:'

.PHONY: chaos-poison
chaos-poison: ## only the poison suite, at full size (10 minutes; HOPPER_POISON_DURATION and HOPPER_POISON_SEED override)
	HOPPER_POISON=full go test -race -count=1 -v -run 'TestPoison' -timeout 60m ./tests/chaos

.PHONY: chaos-restart
chaos-restart: ## only the PostgreSQL-restart scenario, at CI size (CI runs it alone, after make test)
	HOPPER_CHAOS_RESTART=1 go test -count=1 -v -run 'TestChaosDatabaseRestart' ./tests/chaos 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|chaos_test.go'

.PHONY: failover
failover: ## the failover scenarios at full size on a pg_auto_failover formation with its default timings (a switchover, a postmaster and a node killed, a primary silenced; about 6 minutes), figures printed
	bash .ci/debian-package.sh postgresql-15-auto-failover /usr/bin/pg_autoctl
	HOPPER_FAILOVER=full go test -count=1 -v -run 'TestFailover$$' -timeout 40m ./tests/failover 2>&1 | grep -vE 'level=(WARN|INFO)'

.PHONY: citus
citus: ## Hopper on a Citus formation (a coordinator and two worker nodes on local ports; Citus installed from ../shared/citus/install.sh when missing): distributed schemas migrated by schema.Up and hopper migrate, a sharded Hopper (shard.Create, the sharded Client, hopper shards), a sharded worker over four shards on both nodes, the chaos accounting across two shards with worker processes killed, a shard moved online and its node restarted under load, figures printed, everything torn down (about five minutes)
	go test -count=1 -v -run 'TestCitus' -timeout 20m ./tests/citus

# A count of inputs, not a duration: with a duration, Go's fuzzing
# coordinator can race its own deadline and fail with "context deadline
# exceeded" and no failing input (golang/go#75804, fixed in Go 1.27); a
# count has no deadline. FUZZTIME=30s still works, with that risk.
FUZZTIME ?= 20000x

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME inputs (default 20000x; a duration such as 30s works too): enqueue options, payload decode
	go test -run '^$$' -fuzz '^FuzzEnqueueOptions$$' -fuzztime $(FUZZTIME) ./jobs
	go test -run '^$$' -fuzz '^FuzzDecodePayload$$' -fuzztime $(FUZZTIME) ./jobs

.PHONY: bench
bench: ## hopper bench: every mode, the pgbench baseline and the pressure suite (a snapshot held 5 minutes, a 1M-job burst), on a throwaway cluster with production defaults (about 20 minutes)
	go build -o bin/hopper ./cmd/hopper
	bin/hopper bench --scratch-cluster --mode all --baseline --scheduled 1000000 --pressure

.PHONY: bench-flow
bench-flow: ## hopper bench's flow-control modes (a noisy neighbour, 1,000 keys at speed, a rate limit across 3 processes) on a throwaway cluster (about 7 minutes)
	go build -o bin/hopper ./cmd/hopper
	bin/hopper bench --scratch-cluster --mode flow

.PHONY: bench-drain
bench-drain: ## hopper bench's drain of 20,000, 50,000 and 500,000 waiting jobs (each analyzed after its enqueue, as autovacuum would) on a throwaway cluster (about 2 minutes)
	go build -o bin/hopper ./cmd/hopper
	bin/hopper bench --scratch-cluster --mode drain --drain-sizes 20000,50000,500000

.PHONY: bench-durable
bench-durable: ## hopper bench's durable handlers: 5,000 jobs of 10 worker.Step calls against 50,000 plain jobs (drains mirrored, CPU per 1,000 steps), then worker.StepTx against a plain transaction, on a throwaway cluster (about 1 minute)
	go build -o bin/hopper ./cmd/hopper
	bin/hopper bench --scratch-cluster --mode durable

.PHONY: bench-citus
bench-citus: ## hopper bench on Citus: drains of 20,000 jobs on plain PostgreSQL and on a formation of its own (one shard; two shards on one node and on two; the same with each node pinned to a core), twice in turn, CPU per server (about 5 minutes; Citus installed from ../shared when missing)
	go build -o bin/hopper ./cmd/hopper
	bin/hopper bench --scratch-cluster --mode citus

.PHONY: soak
soak: ## hopper bench's soak: an hour of 2,000 jobs/s (plain, sequences, workflows, failures, a schedule) with history and dead jobs kept 5 minutes, sampled every minute, its chart in docs/soak.svg, on a throwaway cluster (about 65 minutes)
	go build -o bin/hopper ./cmd/hopper
	bin/hopper bench --scratch-cluster --mode soak --soak-chart docs/soak.svg

.PHONY: bench-river
bench-river: ## Hopper beside River's own `river bench` (CLI pinned, built into a temp dir) in one run on one throwaway cluster: a 100,000-job drain and 30s of insert + work, H R R H (about 5 minutes)
	bash .ci/bench-river.sh

.PHONY: bench-go
bench-go: ## Go benchmarks of the hot paths (dequeue, ack_batch, COPY, decode with upgrades, a run with and without middleware); compare runs with benchstat
	go test -run '^$$' -bench . -benchmem -count 5 . ./queries ./jobs ./worker

EXAMPLE := examples/embed-sqlc
OTEL := hopperotel
E2E := dashboard/e2e

# The licence test reads hopperotel's modules from the cache with
# GOPROXY=off: fetch them first, as a fresh machine has none.
.PHONY: modules
modules: ## download what the modules' tests import (hopperotel's, for the licence test)
	cd $(OTEL) && go list -deps -test ./... > /dev/null

.PHONY: test
test: modules ## run every test (race detector on) against a real PostgreSQL, the embed-sqlc example's, the OpenTelemetry module's and the dashboard's browser test included
	bash .ci/debian-package.sh pgbouncer /usr/sbin/pgbouncer
	bash .ci/debian-package.sh chromium /usr/bin/chromium
	bash .ci/debian-package.sh python3-psycopg /usr/lib/python3/dist-packages/psycopg
	bash .ci/debian-package.sh postgresql-15-plpgsql-check /usr/lib/postgresql/15/lib/plpgsql_check.so
	bash .ci/debian-package.sh postgresql-15-auto-failover /usr/bin/pg_autoctl
	$(TIMED) "test: go test ./..." go test -race -count=1 -timeout 30m ./...
	$(TIMED) "test: $(EXAMPLE)" bash -c 'cd $(EXAMPLE) && go vet ./... && go test -race -count=1 ./...'
	$(TIMED) "test: $(OTEL)" bash -c 'cd $(OTEL) && go vet ./... && go test -race -count=1 ./...'
	$(TIMED) "test: $(E2E)" bash -c 'cd $(E2E) && go vet ./... && go test -count=1 ./...'

# -p 4: the packages' tests mostly wait on the database and on conditions,
# not on the CPU (a run keeps two cores about a quarter busy), so four run
# at once.
.PHONY: test-short
test-short: modules ## the fast lane, for every change while you work: each package with -short (the slow suites skip; race detector on), and the embed-sqlc example's and hopperotel's tests; about 3 minutes on an idle 2-core machine
	go test -short -race -count=1 -p 4 -parallel 4 -timeout 15m ./...
	cd $(EXAMPLE) && go test -short -race -count=1 ./...
	cd $(OTEL) && go test -short -race -count=1 ./...

.PHONY: api
api: ## record the exported API of each public package in api/ (after an intended API change; note it in CHANGELOG.md)
	bash .ci/api-check.sh write

.PHONY: api-check
api-check: ## fail when the exported API differs from api/ in any way, compatible changes included
	bash .ci/api-check.sh check

.PHONY: docs-check
docs-check: ## check the code blocks and links of README.md, CONTRIBUTING.md and docs/ (make test runs it too)
	go test -count=1 -run 'TestDocs' ./internal/tools/doccheck

.PHONY: check-alerts
check-alerts: ## promtool check and test the alert rules in monitoring/ and check the dashboard's queries (installs Debian's prometheus package if promtool is missing)
	bash .ci/check-alerts.sh

.PHONY: screenshot
screenshot: ## retake docs/dashboard.png with the dashboard's browser test
	cd $(E2E) && HOPPER_UPDATE_SCREENSHOT=1 go test -count=1 -run TestDashboardInABrowser ./...

.PHONY: generate
generate: ## regenerate db/ from schema/ and queries/ with sqlc, the test factory's factorydb/, schema/functions/ (each SQL function's current source), schema/current/schema.sql (needs the tests' PostgreSQL), then the embed-sqlc example's code
	rm -f db/*.go internal/testbed/testfactory/factorydb/*.go shard/internal/sharddb/*.go
	$(SQLC) generate
	$(SQLC) generate -f internal/testbed/testfactory/sqlc.yaml
	$(SQLC) generate -f shard/sqlc.yaml
	go run ./internal/tools/sqlfuncs/gen schema schema/functions
	bash .ci/current-schema.sh schema/current/schema.sql
	$(MAKE) -C $(EXAMPLE) generate

.PHONY: check-generated
check-generated: ## fail when db/, the test factory's factorydb/, schema/functions/ or schema/current/schema.sql differs from what the SQL makes (stale files included)
	rm -rf $(SCRATCH) && mkdir -p $(SCRATCH)/internal/testbed/testfactory $(SCRATCH)/shard
	cp -R sqlc.yaml schema queries $(SCRATCH)/
	cp internal/testbed/testfactory/sqlc.yaml internal/testbed/testfactory/factory.sql $(SCRATCH)/internal/testbed/testfactory/
	cp -R shard/sqlc.yaml shard/sql $(SCRATCH)/shard/
	$(SQLC) generate -f $(SCRATCH)/sqlc.yaml
	$(SQLC) generate -f $(SCRATCH)/internal/testbed/testfactory/sqlc.yaml
	$(SQLC) generate -f $(SCRATCH)/shard/sqlc.yaml
	@if ! diff -r db $(SCRATCH)/db; then \
		echo "db/ is stale: run 'make generate' and commit the result" >&2; exit 1; \
	fi
	@if ! diff -r internal/testbed/testfactory/factorydb $(SCRATCH)/internal/testbed/testfactory/factorydb; then \
		echo "internal/testbed/testfactory/factorydb/ is stale: run 'make generate' and commit the result" >&2; exit 1; \
	fi
	@if ! diff -r shard/internal/sharddb $(SCRATCH)/shard/internal/sharddb; then \
		echo "shard/internal/sharddb/ is stale: run 'make generate' and commit the result" >&2; exit 1; \
	fi
	go run ./internal/tools/sqlfuncs/gen schema $(SCRATCH)/functions
	@if ! diff -r schema/functions $(SCRATCH)/functions; then \
		echo "schema/functions/ is stale: run 'make generate' and commit the result" >&2; exit 1; \
	fi
	bash .ci/current-schema.sh $(SCRATCH)/current-schema.sql
	@if ! diff schema/current/schema.sql $(SCRATCH)/current-schema.sql; then \
		echo "schema/current/schema.sql is stale: run 'make generate' and commit the result" >&2; exit 1; \
	fi
	rm -rf $(SCRATCH)
	$(MAKE) -C $(EXAMPLE) check-generated

.PHONY: vet
vet: ## go vet and gofmt
	go vet ./...
	go -C internal/testbed/testdb/dockerpg vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1; }

.PHONY: lint
lint: ## staticcheck, pinned in tools/go.mod, on Hopper, the embed-sqlc example, hopperotel and dashboard/e2e
	go tool -modfile=tools/go.mod staticcheck ./...
	cd $(EXAMPLE) && go tool -modfile=../../tools/go.mod staticcheck ./...
	cd $(OTEL) && go tool -modfile=../tools/go.mod staticcheck ./...
	cd $(E2E) && go tool -modfile=../../tools/go.mod staticcheck ./...
	cd internal/testbed/testdb/dockerpg && go tool -modfile=../../../../tools/go.mod staticcheck ./...

.PHONY: ci
ci: ## what .ci/run runs once PostgreSQL is up: check-generated, vet, api-check, lint, check-alerts, test, the restart scenario, a short fuzz
	$(TIMED) check-generated $(MAKE) check-generated
	$(TIMED) vet $(MAKE) vet
	$(TIMED) api-check $(MAKE) api-check
	$(TIMED) lint $(MAKE) lint
	$(TIMED) check-alerts $(MAKE) check-alerts
	$(TIMED) "test (all of it)" $(MAKE) test
	$(TIMED) chaos-restart $(MAKE) chaos-restart
	$(TIMED) fuzz $(MAKE) fuzz
