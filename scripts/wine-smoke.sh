#!/usr/bin/env bash
# Runs the Windows build of the agent under Wine (Debian's wine64), as far as
# Wine allows, and checks that nothing acknowledged is lost:
#
#   1. builds rxedge-agent.exe as scripts/package.sh does, but with its
#      development hub (the packages' build, tag rxedge_nodev, has none, and
#      step 3 needs it), and the pipe tests of package control
#      (control.test.exe);
#   2. runs the control package's Windows tests (the named pipe: Listen,
#      Dial, one pipe per data directory);
#   3. `run --dev` (agent and embedded central in one process) with its data
#      under a directory whose path has spaces, like %ProgramData%;
#      movements ingested over HTTP (and a duplicate batch, and a bad one),
#      `status`, `dlq list`, `enqueue` through the control pipe, then a
#      clean stop (Ctrl-C: exit 0, STOPPED logged);
#   4. `status` with the agent stopped (the CLI opens the data file itself):
#      every movement acknowledged is pending or synced, none quarantined;
#   5. a second `run --dev` delivers whatever was pending and stops;
#   6. head office's Linux binary serves the central store the Windows agent
#      wrote (`hq hub`) and `hq reconcile` checks that central holds exactly
#      the movements acknowledged, sequences 1..N, none missing.
#
# Wine's gaps are worked around here, never in the product (docs/internals.md,
# "Windows under Wine"): Wine 8 has no bcryptprimitives.dll, which Go 1.22+
# needs for random bytes, so a stand-in built with mingw-w64 from
# scripts/wine/bcryptprimitives.c goes into the Wine prefix's system32; and
# Wine lets the first client of a go-winio pipe reach the instance Windows
# keeps disconnected, so one throwaway `status` opens it first.
#
# Needs root for apt-get when wine64, mingw-w64 or jq are missing. Prints
# its time and the installed size (the one binary). WINE_SMOKE_KEEP=1 keeps
# the work directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "wine-smoke: FAIL: $*" >&2; exit 1; }
log() { printf 'wine-smoke: %s (%ss)\n' "$*" "$SECONDS"; }

wine=/usr/lib/wine/wine64
if [[ ! -x $wine ]] || ! command -v x86_64-w64-mingw32-gcc >/dev/null || ! command -v jq >/dev/null; then
	command -v apt-get >/dev/null || die "wine64, gcc-mingw-w64-x86-64 or jq missing and no apt-get to install them"
	log "installing wine64, gcc-mingw-w64-x86-64-win32 and jq"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wine64 gcc-mingw-w64-x86-64-win32 jq >/dev/null
fi
log "$("$wine" --version)"

work=$(mktemp -d)
agent_pid= hub_pid=
cleanup() {
	[[ -n $agent_pid ]] && kill -9 "$agent_pid" 2>/dev/null
	[[ -n $hub_pid ]] && kill "$hub_pid" 2>/dev/null
	WINEPREFIX=$work/prefix "${wine%/*}/wineserver" -k 2>/dev/null || true
	if [[ ${WINE_SMOKE_KEEP:-} == 1 ]]; then echo "wine-smoke: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
export WINEPREFIX=$work/prefix WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="

log "building rxedge-agent.exe, control.test.exe and the Linux hq"
exe=$work/bin/rxedge-agent.exe
CGO_ENABLED=0 GOOS=windows GOARCH=amd64 go build -trimpath -ldflags "-s -w" -o "$exe" ./cmd/agent
CGO_ENABLED=0 GOOS=windows GOARCH=amd64 go test -c -o "$work/bin/control.test.exe" ./control
go build -o "$work/bin/hq" ./cmd/hq
install_size=$(stat -c %s "$exe")

log "making the Wine prefix"
"$wine" wineboot -i >"$work/wineboot.log" 2>&1 || { cat "$work/wineboot.log"; die "wineboot"; }
sys32=$WINEPREFIX/drive_c/windows/system32
if [[ ! -e $sys32/bcryptprimitives.dll ]]; then
	x86_64-w64-mingw32-gcc -O2 -shared -s -o "$sys32/bcryptprimitives.dll" \
		scripts/wine/bcryptprimitives.c scripts/wine/bcryptprimitives.def -ladvapi32
fi

# winpath turns a Linux path into the one Wine's Z: drive shows.
winpath() { printf 'Z:%s' "${1//\//\\}"; }
# agent runs a CLI command of the Windows agent.
agent() { "$wine" "$exe" "$@"; }

log "the control package's Windows tests (named pipe)"
(cd "$work" && "$wine" "$work/bin/control.test.exe" -test.run 'TestPipe|TestTrustedPipeOwner|TestControlPipe' -test.v -test.count=1) >"$work/control-test.log" 2>&1 ||
	{ cat "$work/control-test.log"; die "control tests under Wine"; }
grep -E '^(--- |ok|PASS|FAIL)' "$work/control-test.log" | sed 's/^/  /'

# Ports: free ones, picked by the kernel.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
	echo $((20000 + RANDOM % 20000)); }
ingest_port=$(free_port) hub_port=$(free_port)
base="$work/Program Data/RxEdge"
mkdir -p "$base"
data_dir=$(winpath "$base/data")
agent_dir="$data_dir\\agent" # --dev keeps the agent's file under data\agent, central under data\hub
store=S0107

# start_agent runs `run --dev` in the background and waits (deadline 60 s)
# for the ingest listener to answer /healthz.
start_agent() {
	"$wine" "$exe" run --dev --store-id "$store" --data-dir "$data_dir" \
		--ingest "127.0.0.1:$ingest_port" --dev-hub "127.0.0.1:$hub_port" >"$work/run-$1.log" 2>&1 &
	agent_pid=$!
	local deadline=$((SECONDS + 60))
	until curl -fsS -o /dev/null "http://127.0.0.1:$ingest_port/healthz" 2>/dev/null; do
		kill -0 "$agent_pid" 2>/dev/null || { cat "$work/run-$1.log"; die "run --dev exited before it was ready"; }
		((SECONDS < deadline)) || { cat "$work/run-$1.log"; die "run --dev not ready within 60 s"; }
		sleep 0.2
	done
	# Wine gap: the first client of the pipe reaches an instance nobody serves.
	agent status --data-dir "$agent_dir" >/dev/null 2>&1 || true
}

# stop_agent sends Ctrl-C (Wine turns SIGINT into a console control event)
# and checks the clean stop: exit 0 and STOPPED in the log.
stop_agent() {
	kill -INT "$agent_pid"
	local rc=0
	wait "$agent_pid" || rc=$?
	agent_pid=
	((rc == 0)) || { cat "$work/run-$1.log"; die "run --dev exited $rc after Ctrl-C, want 0"; }
	grep -q '"msg":"STOPPED"' "$work/run-$1.log" || { cat "$work/run-$1.log"; die "no STOPPED record after Ctrl-C"; }
}

# movements N FROM writes N movements as JSON lines, ids FROM.., every
# fifth a Schedule II one.
movements() {
	local i sched
	for ((i = $2; i < $2 + $1; i++)); do
		sched=
		((i % 5 == 0)) && sched=',"schedule":"CII"'
		printf '{"movement_id":"wine-%d","type":"dispense","ndc":"12345-6789-01","quantity":%d,"unit":"EA","occurred_at":"2026-01-02T03:04:05Z"%s}\n' \
			"$i" $((i % 7 + 1)) "$sched"
	done
}
post() { curl -sS -o "$work/post.json" -w '%{http_code}' -XPOST "http://127.0.0.1:$ingest_port/v1/movements" \
	-H 'Content-Type: application/x-ndjson' --data-binary @"$1"; }

t_run=$SECONDS
log "run --dev (data under \"$data_dir\")"
start_agent 1

total=0
for b in 0 1 2; do
	movements 100 $((b * 100)) >"$work/batch-$b.jsonl"
	code=$(post "$work/batch-$b.jsonl")
	[[ $code == 202 ]] || die "POST batch $b: HTTP $code: $(head -c 300 "$work/post.json")"
	[[ $(jq .accepted "$work/post.json") == 100 ]] || die "POST batch $b: $(head -c 300 "$work/post.json")"
	total=$((total + 100))
done
code=$(post "$work/batch-0.jsonl")
[[ $code == 2?? && $(jq .duplicates "$work/post.json") == 100 && $(jq .accepted "$work/post.json") == 0 ]] ||
	die "resubmitted batch: HTTP $code: $(head -c 300 "$work/post.json")"
printf '{"movement_id":"wine-bad","type":"dispense","ndc":"x","quantity":-1,"unit":"EA","occurred_at":"2026-01-02T03:04:05Z"}\n' >"$work/bad.jsonl"
code=$(post "$work/bad.jsonl")
[[ $code == 400 ]] || die "invalid movement: HTTP $code, want 400"
log "ingested $total movements over HTTP (a resubmitted batch: 100 duplicates; an invalid one: 400)"

agent status --json --data-dir "$agent_dir" >"$work/status.json" || true
[[ $(jq -r .agent.running "$work/status.json") == true ]] || { cat "$work/status.json"; die "status through the pipe: agent not running"; }
log "status through the control pipe: $(jq -c '{state: .connection.state, pending: .counts.pending.total, synced: .counts.synced.total}' "$work/status.json")"

agent dlq list --json --data-dir "$agent_dir" >"$work/dlq.json"
[[ $(jq .matched "$work/dlq.json") == 0 ]] || { cat "$work/dlq.json"; die "dlq list: quarantined movements"; }
log "dlq list through the control pipe: empty"

# A second agent for the same data directory: bbolt's lock (LockFileEx)
# refuses it before it touches the pipe, and the first one goes on.
rc=0
out=$(timeout 120 "$wine" "$exe" run --store-id "$store" --data-dir "$agent_dir" --ingest off 2>&1) || rc=$?
((rc != 0)) || die "a second agent on the same data directory started"
[[ $out == *"already running"* ]] || die "second agent: exit $rc without the already-running message: $out"
curl -fsS -o /dev/null "http://127.0.0.1:$ingest_port/healthz" || die "the first agent stopped answering after the second was refused"
log "a second agent on the same data directory: refused (exit $rc, already running)"

movements 50 1000 >"$work/enqueue.jsonl"
out=$(agent enqueue -f "$(winpath "$work/enqueue.jsonl")" --data-dir "$agent_dir")
[[ $out == *"accepted 50, duplicates 0, rejected 0"* ]] || die "enqueue: $out"
total=$((total + 50))
log "enqueue through the control pipe: $out"

stop_agent 1
log "clean stop after Ctrl-C"

agent status --json --data-dir "$agent_dir" >"$work/status-stopped.json" || true
read -r running pending synced quarantined < <(jq -r '[.agent.running, .counts.pending.total, .counts.synced.total, .counts.quarantined.total] | @tsv' "$work/status-stopped.json")
[[ $running == false ]] || die "status after the stop says the agent runs"
((pending + synced == total && quarantined == 0)) ||
	die "after the stop: pending $pending + synced $synced != acknowledged $total (quarantined $quarantined)"
log "after the stop (file opened by the CLI): pending $pending, synced $synced, of $total acknowledged"

start_agent 2
deadline=$((SECONDS + 120))
while :; do
	agent status --json --data-dir "$agent_dir" >"$work/status.json" || true
	[[ $(jq .counts.synced.total "$work/status.json") == "$total" ]] && break
	((SECONDS < deadline)) || { cat "$work/status.json"; die "second run: not all $total synced within 120 s"; }
	sleep 0.5
done
stop_agent 2
run_time=$((SECONDS - t_run))
log "second run delivered the rest: synced $total"

log "central, read at head office: hq hub on the store the Windows agent wrote, then hq reconcile"
"$work/bin/hq" hub --store-dir "$base/data/hub" --listen "127.0.0.1:$hub_port" >"$work/hub.log" 2>&1 &
hub_pid=$!
deadline=$((SECONDS + 30))
until "$work/bin/hq" reconcile --server "nats://127.0.0.1:$hub_port" --no-ask --json >"$work/reconcile.json" 2>"$work/reconcile.err"; do
	((SECONDS < deadline)) || { cat "$work/hub.log" "$work/reconcile.err"; die "hq reconcile"; }
	sleep 0.5
done
read -r held missing conflicts repeats < <(jq -r --arg s "$store" '.stores[] | select(.store == $s) | [.held, .missing, .conflicts, .repeats] | @tsv' "$work/reconcile.json")
[[ $held == "$total" && $missing == 0 && $conflicts == 0 && $repeats == 0 ]] ||
	{ cat "$work/reconcile.json"; die "central holds $held of $total (missing $missing, conflicts $conflicts, repeats $repeats)"; }
log "central holds all $total movements once each (sequences 1..$total, none missing)"

# The MSI under Wine's msiexec, as far as Wine goes. Wine 8's msi writes
# the service's image path without quotes, which `install --msi` refuses
# (an unquoted path with spaces is the unquoted-service-path hole), so the
# binary goes to C:\RxEdge here; then ConfigureAgent stops at Wine's
# missing SERVICE_CONFIG_SERVICE_SID_INFO and the install rolls back. The
# GitHub Actions Windows job installs, upgrades and uninstalls it for real.
msi_result="not tried (wixl or msibuild missing)"
# Wine's service manager must keep a service it created, or msiexec's
# InstallServices does nothing and the install cannot get further: probe
# it with sc.exe first, and say so when it does not (seen on some
# machines: sc create succeeds, sc query then answers 1060).
scm_ok=1
if "$wine" sc create rxedge-probe binPath= 'C:\probe.exe' >/dev/null 2>&1 && "$wine" sc query rxedge-probe >/dev/null 2>&1; then
	"$wine" sc delete rxedge-probe >/dev/null 2>&1 || true
else
	scm_ok=0
	msi_result="not tried: Wine's service manager does not keep a created service here (sc create, then sc query fails)"
fi
if ((scm_ok)) && command -v wixl >/dev/null && command -v msibuild >/dev/null; then
	log "the MSI under Wine's msiexec"
	DIST=$work/dist VERSION=0.0.1 PLATFORMS=windows/amd64 bash scripts/package.sh >"$work/package.log" 2>&1 ||
		{ cat "$work/package.log"; die "package.sh (MSI)"; }
	rc=0
	"$wine" msiexec /i "$(winpath "$work/dist/rxedge-agent_0.0.1_windows_amd64.msi")" /qn /l*v "$(winpath "$work/msi.log")" \
		STORE_ID=S0107 NATS_URL=nats://127.0.0.1:4222 'INSTALLDIR=C:\RxEdge\' >"$work/msi.out" 2>&1 || rc=$?
	pd=$WINEPREFIX/drive_c/ProgramData/RxEdge
	if ((rc == 0)); then
		[[ -f $WINEPREFIX/drive_c/RxEdge/rxedge-agent.exe && -f $pd/agent.yaml && -f $pd/ingest.token ]] || die "msiexec /i exited 0 but left no agent"
		"$wine" msiexec /x "$(winpath "$work/dist/rxedge-agent_0.0.1_windows_amd64.msi")" /qn >/dev/null 2>&1 || die "msiexec /x"
		[[ ! -e $WINEPREFIX/drive_c/RxEdge/rxedge-agent.exe && -f $pd/agent.yaml ]] || die "uninstall did not remove the binary and keep the config"
		msi_result="installed and uninstalled (config kept)"
	else
		grep -q 'set service SID type' "$work/msi.out" || { cat "$work/msi.out"; die "msiexec /i failed ($rc) other than at Wine's known gap"; }
		[[ -f $pd/agent.yaml && -f $pd/ingest.token ]] || { cat "$work/msi.out"; die "ConfigureAgent did not write the config and token"; }
		[[ ! -e $WINEPREFIX/drive_c/RxEdge/rxedge-agent.exe ]] || die "the failed install was not rolled back"
		msi_result="ran to ConfigureAgent (config and token written), stopped at Wine's missing service SID type, rolled back"
	fi
fi
log "MSI under Wine: $msi_result"

printf 'wine-smoke: PASS: %d movements acknowledged, all in central once; agent runs and CLI %ds, whole smoke %ds; installed size %d bytes (%.1f MiB, rxedge-agent.exe)\n' \
	"$total" "$run_time" "$SECONDS" "$install_size" "$(awk -v b="$install_size" 'BEGIN { print b / 1048576 }')"
