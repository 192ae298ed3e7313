#!/usr/bin/env bash
# .ci/timed.sh LABEL COMMAND...: run COMMAND and, when HOPPER_CI_TIMES names
# a file, append LABEL, its wall time and whether it passed, so that
# .ci/run prints the time of every part at the end, pass or fail, and the
# trend shows in every run. Exits with COMMAND's status.
set -uo pipefail
label=$1
shift
start=$(date +%s)
"$@"
rc=$?
if [ -n "${HOPPER_CI_TIMES:-}" ]; then
	status=ok
	[ "$rc" = 0 ] || status=FAILED
	printf '  %-34s %5ds  %s\n' "$label" "$(($(date +%s) - start))" "$status" >>"$HOPPER_CI_TIMES"
fi
exit "$rc"
