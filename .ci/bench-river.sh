#!/usr/bin/env bash
# Hopper beside River, in one run, on one throwaway PostgreSQL cluster.
#
# `make bench-river` runs it. It starts a scratch cluster the way `hopper
# bench --scratch-cluster` does (initdb into a temporary directory, its own
# port, production defaults: autovacuum, fsync and synchronous_commit on),
# builds River's CLI at a pinned version into a temporary directory (River's
# code is never vendored nor committed), migrates River into a database of
# its own, then runs the two benchmarks in comparable modes, alternating
# H, R, R, H so that drift over the run shows:
#
#   drain       a backlog of DRAIN_JOBS jobs enqueued first, then worked
#               (hopper bench --mode drain --jobs N; river bench -n N)
#   continuous  insert and work at once for DURATION
#               (hopper bench --mode continuous; river bench --duration)
#
# Both use a no-op handler and 2,000 handler slots: River's bench has one
# client with MaxWorkers 2,000 (fixed in its code), Hopper's 2 workers ×
# 1,000 slots (its defaults). It prints one table of jobs/s, with the
# versions, the machine and the settings. About 3–5 minutes with the defaults.
#
# Environment: RIVER_VERSION, DRAIN_JOBS, DURATION, WINDOW.
set -euo pipefail

RIVER_VERSION=${RIVER_VERSION:-v0.31.0}
DRAIN_JOBS=${DRAIN_JOBS:-100000}
DURATION=${DURATION:-30s}
WINDOW=${WINDOW:-5s}

cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d /tmp/hopper-bench-river.XXXXXX)
data=$tmp/data
pgbin=
as_pg=()

cleanup() {
	if [[ -n $pgbin && -f $data/postmaster.pid ]]; then
		"${as_pg[@]}" "$pgbin/pg_ctl" stop -w -m fast -D "$data" >/dev/null 2>&1 ||
			"${as_pg[@]}" "$pgbin/pg_ctl" stop -w -m immediate -D "$data" >/dev/null 2>&1 || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

say() { printf 'bench-river: %s\n' "$*" >&2; }

# --- the two CLIs ----------------------------------------------------------

say "building bin/hopper"
go build -o bin/hopper ./cmd/hopper
hopper=$root/bin/hopper
hopper_version=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)

# River's CLI is a module of its own. It is built in a throwaway module that
# requires it at the pinned version (go install pkg@version also asks the
# proxy for the module's version list, which a partial mirror may not serve).
say "building River's CLI $RIVER_VERSION"
mkdir -p "$tmp/rivermod" "$tmp/bin"
cat >"$tmp/rivermod/go.mod" <<EOF
module hopperbenchriver

go 1.26

require github.com/riverqueue/river/cmd/river $RIVER_VERSION
EOF
river=$tmp/bin/river
build_river() {
	(cd "$tmp/rivermod" && GOFLAGS=-mod=mod GOWORK=off go build -o "$river" github.com/riverqueue/river/cmd/river)
}
if ! build_river 2>"$tmp/river-build.log"; then
	# A mirror of the module proxy may not serve the checksum database's
	# entry for the CLI's own module; its dependencies are still verified.
	if grep -q 'sumdb.*cmd/river.*404\|verifying module: github.com/riverqueue/river/cmd/river' "$tmp/river-build.log"; then
		say "NOTE: the checksum database has no entry for github.com/riverqueue/river/cmd/river@$RIVER_VERSION here; building it without (GONOSUMDB for that module only)"
		GONOSUMDB=github.com/riverqueue/river/cmd/river build_river
	else
		cat "$tmp/river-build.log" >&2
		exit 1
	fi
fi
river_version=$("$river" version 2>/dev/null | head -1 || echo "River $RIVER_VERSION")

# --- the scratch cluster ---------------------------------------------------

for d in "$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/x)")" $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
	if [[ -x $d/initdb && -x $d/pg_ctl ]]; then
		pgbin=$d
		break
	fi
done
[[ -n $pgbin ]] || { say "initdb and pg_ctl not found on the PATH nor in /usr/lib/postgresql/*/bin"; exit 1; }
if [[ $(id -u) == 0 ]]; then
	# initdb and postgres refuse root.
	chown postgres: "$tmp"
	as_pg=(runuser -u postgres --)
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${as_pg[@]}" "$pgbin/initdb" -D "$data" --auth=trust --username=postgres --encoding=UTF8 --no-instructions >"$tmp/initdb.log"
printf "\n# hopper bench-river scratch cluster\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n" "$port" "$tmp" >>"$data/postgresql.conf"
"${as_pg[@]}" "$pgbin/pg_ctl" start -w -t 120 -D "$data" -l "$tmp/postgres.log" >/dev/null
base=postgres://postgres@127.0.0.1:$port
psql_bin=$pgbin/psql
[[ -x $psql_bin ]] || psql_bin=psql
sql() { "$psql_bin" "$base/postgres?sslmode=disable" -X -q -At "$@"; }
sql -c 'CREATE DATABASE hopper' -c 'CREATE DATABASE river'
hopper_url=$base/hopper?sslmode=disable
river_url=$base/river?sslmode=disable
pg_version=$(sql -c 'SHOW server_version')
settings=$(sql -F= -c "SELECT name, current_setting(name) FROM pg_settings WHERE name IN ('autovacuum', 'autovacuum_naptime', 'synchronous_commit', 'fsync', 'shared_buffers', 'max_wal_size', 'max_connections') ORDER BY name" | tr '\n' ' ')
say "scratch cluster: PostgreSQL $pg_version on port $port ($settings)"

say "migrating River into database river"
"$river" migrate-up --database-url "$river_url" >"$tmp/river-migrate.log"

# --- the runs --------------------------------------------------------------

rows=()
start_load=$(cut -d' ' -f1-3 /proc/loadavg)
load() { cut -d' ' -f1 /proc/loadavg; }

# hopper_run MODE ARGS…: prints "headline whole-run" jobs/s.
hopper_run() {
	local mode=$1 out
	shift
	out=$("$hopper" bench --database-url "$hopper_url" --mode "$mode" --json "$@" 2>>"$tmp/hopper.log")
	case $mode in
	drain) jq -r '.drain | "\(.jobs_per_second) \(.jobs_per_second)"' <<<"$out" ;;
	continuous) jq -r '.continuous | "\(.steady_worked_per_second) \(.worked_per_second)"' <<<"$out" ;;
	esac
}

# river_run MODE ARGS…: prints "headline whole-run" jobs/s. The headline of
# a drain is River's overall job/sec (jobs worked over the time from the
# client's start to the last job worked); of a continuous run, like
# Hopper's, the mean of the last half of its windows (River's are 2 s long;
# the first, of 0 s, is left out).
river_run() {
	local mode=$1 log=$tmp/river-run.log
	shift
	"$river" bench --database-url "$river_url" "$@" >"$log" 2>>"$tmp/river.log"
	cat "$log" >>"$tmp/river.log"
	local overall
	overall=$(sed -n 's/.*overall job\/sec \[ *\([0-9.]*\) *\].*/\1/p' "$log" | tail -1)
	sed -n 's/.*job\/sec \[ *\([0-9.]*\) *\] \[2s\].*/\1/p' "$log" |
		awk -v overall="$overall" -v mode="$mode" '{ w[NR] = $1 } END {
			if (NR == 0 || mode == "drain") { print overall, overall; exit }
			from = int(NR / 2) + 1; s = 0
			for (i = from; i <= NR; i++) s += w[i]
			printf "%.1f %s\n", s / (NR - from + 1), overall
		}'
}

run() { # name kind command…
	local name=$1 kind=$2 before after result
	shift 2
	before=$(load)
	say "$name $kind …"
	result=$("$@")
	after=$(load)
	say "$name $kind: $(printf '%.0f (whole run %.0f)' $result) jobs/s (load $before → $after)"
	rows+=("$kind|$name|$result|$before → $after")
}

for who in H R R H; do
	if [[ $who == H ]]; then
		run hopper drain hopper_run drain --jobs "$DRAIN_JOBS"
	else
		run river drain river_run drain --num-total-jobs "$DRAIN_JOBS"
	fi
done
for who in H R R H; do
	if [[ $who == H ]]; then
		run hopper continuous hopper_run continuous --duration "$DURATION" --window "$WINDOW"
	else
		run river continuous river_run continuous --duration "$DURATION"
	fi
done

# --- the report ------------------------------------------------------------

echo
echo "Hopper beside River, one run, one scratch cluster ($(date -u +%Y-%m-%dT%H:%MZ))"
echo "  Hopper:  $hopper_version (bin/hopper bench)"
echo "  River:   $river_version (github.com/riverqueue/river/cmd/river $RIVER_VERSION, river bench)"
echo "  Go:      $(go env GOVERSION)"
echo "  machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), load average (1, 5, 15 min) $start_load before the runs, $(cut -d' ' -f1-3 /proc/loadavg) after"
echo "  server:  PostgreSQL $pg_version, scratch cluster, $settings"
echo "  drain:   $DRAIN_JOBS jobs enqueued first, then worked; 2,000 slots (Hopper 2 workers × 1,000, River MaxWorkers 2,000), no-op handler"
echo "  continuous: $DURATION, insert and work at once; headline = mean of the last half of the windows (Hopper $WINDOW, River 2s)"
echo
printf '%-11s %-7s %14s %16s   %s\n' mode bench "jobs/s" "whole run" "load average (1 min), before → after"
for r in "${rows[@]}"; do
	IFS='|' read -r kind name result l <<<"$r"
	read -r head whole <<<"$result"
	printf '%-11s %-7s %14.0f %16.0f   %s\n' "$kind" "$name" "$head" "$whole" "$l"
done
