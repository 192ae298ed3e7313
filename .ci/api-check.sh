#!/usr/bin/env bash
# The guard of Hopper's public Go API. For each public package it keeps two
# files in api/:
#   api/<name>.txt     every exported declaration, one a line (apilist): what
#                      a reviewer reads in a diff, and what "check" compares
#   api/<name>.export  its export data, written by golang.org/x/exp's apidiff
#                      (pinned in tools/go.mod), which classifies a change as
#                      compatible or not
#
#   bash .ci/api-check.sh write   rewrite api/ from the current code (make api)
#   bash .ci/api-check.sh check   fail on any change to the API, compatible
#                                 ones included (make api-check)
#
# check fails when a listing differs from api/<name>.txt, or when apidiff
# reports any change against api/<name>.export (it sees what a listing
# cannot, such as a struct that stops being comparable). The listing comes
# from go/types, so it is the same under every Go release; should apidiff
# fail to read an export file (one written by another apidiff), check says
# so and relies on the listing.
#
# API_DIR=dir writes and checks another directory than api/ (for trying the
# script out).
set -euo pipefail

cd "$(dirname "$0")/.."
export GOWORK=off # the committed modules, not a go.work of the working tree

MODULE=github.com/hopperq/hopper
PACKAGES=(. jobs worker schema shard hoppertest dashboard)
API_DIR=${API_DIR:-api}

usage() {
	echo "usage: $0 write|check" >&2
	exit 2
}
[ $# -eq 1 ] || usage
mode=$1
case $mode in write | check) ;; *) usage ;; esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/apilist" ./internal/tools/doccheck/apilist
go build -modfile=tools/go.mod -o "$tmp/apidiff" golang.org/x/exp/cmd/apidiff

name_of() { if [ "$1" = . ]; then echo hopper; else basename "$1"; fi; }
path_of() { if [ "$1" = . ]; then echo "$MODULE"; else echo "$MODULE/$1"; fi; }

if [ "$mode" = write ]; then
	mkdir -p "$API_DIR"
	for pkg in "${PACKAGES[@]}"; do
		name=$(name_of "$pkg")
		path=$(path_of "$pkg")
		"$tmp/apilist" "$path" >"$tmp/$name.txt"
		mv "$tmp/$name.txt" "$API_DIR/$name.txt"
		"$tmp/apidiff" -w "$API_DIR/$name.export" "$path"
		echo "wrote $API_DIR/$name.txt ($(wc -l <"$API_DIR/$name.txt") declarations) and $API_DIR/$name.export"
	done
	exit 0
fi

failed=()
for pkg in "${PACKAGES[@]}"; do
	name=$(name_of "$pkg")
	path=$(path_of "$pkg")
	if [ ! -f "$API_DIR/$name.txt" ] || [ ! -f "$API_DIR/$name.export" ]; then
		echo "$path: no $API_DIR/$name.txt or $API_DIR/$name.export: its API was never recorded"
		failed+=("$path")
		continue
	fi
	changed=
	"$tmp/apilist" "$path" >"$tmp/$name.txt"
	if ! diff -u --label "$API_DIR/$name.txt (recorded)" --label "$path (now)" "$API_DIR/$name.txt" "$tmp/$name.txt" >"$tmp/$name.diff"; then
		changed=1
	fi
	report=
	if report=$("$tmp/apidiff" "$API_DIR/$name.export" "$path" 2>"$tmp/$name.err"); then
		[ -z "$report" ] || changed=1
	else
		echo "warning: apidiff cannot compare $path with $API_DIR/$name.export ($(head -n1 "$tmp/$name.err")); the listing alone decides"
		report=
	fi
	if [ -n "$changed" ]; then
		failed+=("$path")
		echo "== $path: its exported API changed"
		if [ -n "$report" ]; then
			echo "-- apidiff:"
			echo "$report"
		fi
		if [ -s "$tmp/$name.diff" ]; then
			echo "-- declarations:"
			cat "$tmp/$name.diff"
		fi
		echo
	fi
done

if [ ${#failed[@]} -gt 0 ]; then
	cat <<EOF
The exported API of ${failed[*]} differs from what $API_DIR/ records.
Every change to it, a compatible one included, is deliberate: if this one is,
run 'make api', commit $API_DIR/ with the change, and note it in CHANGELOG.md
(an incompatible one under "Changed" or "Removed", with what users do instead).
EOF
	exit 1
fi
echo "api-check: the exported API of ${#PACKAGES[@]} packages matches $API_DIR/"
