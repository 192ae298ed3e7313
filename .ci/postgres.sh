#!/usr/bin/env bash
# Make sure a local PostgreSQL answers on 127.0.0.1:5432 with a role and a
# database for the current user: start the cluster if it is down, install it
# from Debian's packages if it is missing. Idempotent.
set -euo pipefail

answers() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
	echo "postgres: not installed; installing from Debian's packages"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq postgresql postgresql-contrib >/dev/null
fi

if ! answers; then
	version=$(ls /etc/postgresql | sort -V | tail -n 1)
	echo "postgres: starting cluster $version/main"
	pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
	for _ in $(seq 1 60); do answers && break; sleep 1; done
fi
answers || { echo "postgres: does not answer on 127.0.0.1:5432" >&2; exit 1; }

# A role and a database named after the current user, as libpq's defaults
# expect (a fresh Debian install has only the postgres role).
me=$(id -un)
as_postgres() { if [ "$me" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi; }
if ! psql -h 127.0.0.1 -d postgres -Atc 'SELECT 1' >/dev/null 2>&1; then
	as_postgres psql -d postgres -v ON_ERROR_STOP=1 -qc "DO \$\$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$me') THEN CREATE ROLE \"$me\" LOGIN SUPERUSER; END IF;
	END \$\$;"
	# Trust local TCP connections, as the tests use no password.
	hba=$(as_postgres psql -d postgres -Atc 'SHOW hba_file')
	if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
		sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$hba"
		as_postgres psql -d postgres -qc 'SELECT pg_reload_conf()' >/dev/null
	fi
fi
if ! psql -h 127.0.0.1 -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = '$me'" | grep -q 1; then
	createdb -h 127.0.0.1 "$me"
fi

# The test suites run two packages at once, each with parallel tests, worker
# processes and their pools: Debian's default of 100 connections runs out
# (seen: "sorry, too many clients already" on a loaded machine). Raise it
# once, in a conf.d file of the project's own, and restart to apply it.
want_conns=300
have_conns=$(psql -h 127.0.0.1 -d postgres -Atc 'SHOW max_connections')
if [ "$have_conns" -lt "$want_conns" ]; then
	confd=$(dirname "$(psql -h 127.0.0.1 -d postgres -Atc 'SHOW config_file')")/conf.d
	echo "postgres: raising max_connections from $have_conns to $want_conns ($confd/95-hopper-tests.conf)"
	mkdir -p "$confd"
	echo "max_connections = $want_conns # hopper's test suites (.ci/postgres.sh)" > "$confd/95-hopper-tests.conf"
	version=$(ls /etc/postgresql | sort -V | tail -n 1)
	pg_ctlcluster --skip-systemctl-redirect "$version" main restart
	for _ in $(seq 1 60); do answers && break; sleep 1; done
	answers || { echo "postgres: does not answer after the restart" >&2; exit 1; }
fi
echo "postgres: ready on 127.0.0.1:5432 (max_connections $(psql -h 127.0.0.1 -d postgres -Atc 'SHOW max_connections'))"
