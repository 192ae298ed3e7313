#!/usr/bin/env bash
# Check the Prometheus alerting rules in monitoring/prometheus: promtool
# check rules (syntax, PromQL, templates), then promtool test rules (each
# alert fires on a series that should fire it, and stays quiet on one that
# should not). The Grafana dashboard's queries are checked as PromQL too.
# (worker/monitoring_names_test.go checks that every metric both name is
# one the worker exports.) promtool comes from Debian's prometheus package, installed
# by .ci/debian-package.sh when it is missing. Without promtool and without
# root it says what to install and skips (with CI set, it fails).
set -euo pipefail
cd "$(dirname "$0")/.."

promtool=${PROMTOOL:-/usr/bin/promtool}
rules=monitoring/prometheus/hopper-alerts.yml
tests=monitoring/prometheus/hopper-alerts_test.yml
dashboard=monitoring/grafana/hopper-dashboard.json

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

# Each "expr" of the dashboard (one a line: the file is indented JSON)
# becomes a recording rule, its JSON string kept as a YAML double-quoted
# one, with Grafana's variables given values.
queries=$(mktemp --suffix=.yml)
trap 'rm -f "$queries"' EXIT
{
	echo 'groups: [{name: dashboard, rules: ['
	grep -o '"expr": ".*"' "$dashboard" |
		sed -e 's/^"expr": //' -e 's/\$__rate_interval/5m/g' -e 's/\$queue/.*/g' |
		awk '{ printf "  {record: dashboard_query_%d, expr: %s},\n", NR, $0 }'
	echo ']}]'
} >"$queries"
count=$(grep -c '"expr"' "$dashboard")
if [ "$count" = 0 ]; then
	echo "check-alerts: no queries found in $dashboard" >&2
	exit 1
fi
echo "Checking $dashboard's $count queries"
"$promtool" check rules "$queries" >/dev/null
