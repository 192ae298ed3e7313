#!/usr/bin/env bash
# Install a Debian package that a test needs, unless PROGRAM is there
# already: .ci/debian-package.sh PACKAGE PROGRAM. make test uses it for
# pgbouncer (tests/pgbouncer_test.go starts its own instance; the
# package's service is not used), chromium (dashboard/e2e/, the dashboard's
# browser test; no test downloads a browser of its own) and python3-psycopg
# (tests/sqlapi_test.go enqueues through the SQL API from Python; PROGRAM is
# then the module's directory) and postgresql-15-plpgsql-check
# (schema/plpgsql_check_test.go; PROGRAM is then its library) and
# postgresql-15-auto-failover (internal/testbed/hacluster: a pg_auto_failover
# formation for the failover scenarios; PROGRAM is its pg_autoctl). Idempotent;
# without root it can only say what is missing, and the test skips (or,
# with CI set, fails).
set -euo pipefail
package=$1 program=$2

if [ -e "$program" ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "$package: not installed, and installing it needs root: apt-get install $package" >&2
	exit 0
fi
echo "$package: not installed; installing from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
# An install killed half-way (a session that ended while apt ran) leaves
# dpkg "interrupted", and every later install refuses until it is
# finished; finishing it is idempotent. Another apt still running holds
# the lock: wait for it rather than fail.
lock=(-o DPkg::Lock::Timeout=600)
dpkg --configure -a >/dev/null 2>&1 || true
apt-get "${lock[@]}" install -y -qq "$package" >/dev/null 2>&1 ||
	{ apt-get "${lock[@]}" update -qq && apt-get "${lock[@]}" install -y -qq "$package" >/dev/null; }
