#!/usr/bin/env bash
# Hunts flaky tests: runs the README's test command N times (default 3) with
# busy loops beside it (default 2, one per core of a CI machine), so that
# tests which only pass on an idle machine fail here first.
#
#   scripts/hunt-flaky.sh [RUNS] [HOGS]
#
# Each run's output goes to bench-out/hunt/run-K.log; the script ends with
# one line per run and exits 1 if any run failed. Extra arguments for
# `go test` can be given in GOTESTFLAGS (e.g. GOTESTFLAGS='-run Sync').
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${1:-3}
hogs=${2:-2}
out=bench-out/hunt
mkdir -p "$out"

pids=()
stop_hogs() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
	(while :; do :; done) &
	pids+=("$!")
done

failed=0
summary=()
for k in $(seq "$runs"); do
	start=$SECONDS
	# shellcheck disable=SC2086 # GOTESTFLAGS is a list of flags
	if go test -race -count=1 ${GOTESTFLAGS:-} ./... >"$out/run-$k.log" 2>&1; then
		summary+=("run $k: ok ($((SECONDS - start)) s)")
	else
		failed=1
		summary+=("run $k: FAILED ($((SECONDS - start)) s): $(grep -E '^(--- FAIL|FAIL)' "$out/run-$k.log" | tr '\n' ' ')")
	fi
done
printf '%s\n' "${summary[@]}"
exit "$failed"
