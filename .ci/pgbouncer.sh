#!/usr/bin/env bash
# Install PgBouncer from Debian's packages for the PgBouncer test
# (tests/pgbouncer_test.go starts its own instance on a free port; the
# package's own service is not used). Idempotent; without root it can only
# say what is missing, and the test skips (or, with CI set, fails).
set -euo pipefail

if [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "pgbouncer: not installed, and installing it needs root: apt-get install pgbouncer" >&2
	exit 0
fi
echo "pgbouncer: not installed; installing from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq pgbouncer >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq pgbouncer >/dev/null; }
