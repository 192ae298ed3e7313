#!/usr/bin/env bash
# Check the Prometheus alerting rules in monitoring/prometheus: promtool
# check rules (syntax, PromQL, templates), then promtool test rules (each
# alert fires on a series that should fire it, and stays quiet on one that
# should not). promtool comes from Debian's prometheus package, installed
# by .ci/debian-package.sh when it is missing. Without promtool and without
# root it says what to install and skips (with CI set, it fails).
set -euo pipefail
cd "$(dirname "$0")/.."

promtool=${PROMTOOL:-/usr/bin/promtool}
rules=monitoring/prometheus/hopper-alerts.yml
tests=monitoring/prometheus/hopper-alerts_test.yml

if [ -z "${PROMTOOL:-}" ]; then
	bash .ci/debian-package.sh prometheus "$promtool"
fi
if [ ! -x "$promtool" ]; then
	if [ -n "${CI:-}" ]; then
		echo "check-alerts: $promtool is missing" >&2
		exit 1
	fi
	echo "check-alerts: skipped, $promtool is missing" >&2
	exit 0
fi

"$promtool" check rules "$rules"
"$promtool" test rules "$tests"
