#!/usr/bin/env bash
# Runs the installer's integration test (installer/install_integration_test.go)
# against a real systemd: boots a Debian root filesystem with systemd as PID 1
# in a systemd-nspawn container, with the agent binaries, the packages (the
# store's rxedge-agent and head office's rxedge-hq) and the test binary bound
# read-only at /opt/rxedge-ci, and runs the tests inside.
#
# Needs root. Installs systemd-container and debootstrap with apt-get when
# missing. The root filesystem is built once with debootstrap from the Debian
# mirror apt uses on this machine and kept in /var/cache/rxedge-ci, keyed by
# a hash of the suite and package list; each run boots a fresh copy of it.
# Nothing but Debian packages is downloaded. The container has no network
# (--private-network gives it loopback only).
#
# Environment: RXEDGE_CI_CACHE overrides the cache directory; DIST, when it
# names a directory holding the .deb packages made by scripts/package.sh,
# has them installed in the container too (otherwise they are built here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

suite=bookworm
packages=systemd,systemd-sysv,dbus
cache=${RXEDGE_CI_CACHE:-/var/cache/rxedge-ci}
boot_timeout=120
test_timeout=15m

die() { echo "systemd-container: $*" >&2; exit 1; }
log() { printf 'systemd-container: %s (%ss)\n' "$*" "$SECONDS"; }

[[ $(id -u) == 0 ]] || die "needs root: it boots a container and installs packages"

if ! command -v systemd-nspawn >/dev/null || ! command -v debootstrap >/dev/null; then
	command -v apt-get >/dev/null || die "systemd-nspawn or debootstrap missing and no apt-get to install them"
	log "installing systemd-container and debootstrap"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container debootstrap >/dev/null
fi

# debian_mirror prints the first Debian archive URI apt is configured with
# (deb822 .sources files first, then one-line sources.list entries),
# leaving out the security archive.
debian_mirror() {
	local f uri
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		while read -r uri; do
			[[ $uri == *security* ]] && continue
			echo "$uri"; return 0
		done < <(awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' "$f")
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -r $f ]] || continue
		while read -r uri; do
			[[ $uri == *security* ]] && continue
			echo "$uri"; return 0
		done < <(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; break } }' "$f")
	done
	return 1
}

key=$(printf '%s\n' "$suite" minbase "$packages" | sha256sum | cut -c1-16)
base=$cache/rootfs-$suite-$key
if [[ ! -f $base/.rxedge-complete ]]; then
	mirror=$(debian_mirror) || die "no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d; configure apt first"
	log "building the $suite root filesystem from $mirror into $base"
	mkdir -p "$cache"
	rm -rf "$base.tmp"
	debootstrap --variant=minbase --include="$packages" "$suite" "$base.tmp" "$mirror" >"$cache/debootstrap-$key.log" 2>&1 ||
		die "debootstrap failed; see $cache/debootstrap-$key.log"
	# A root password is not needed: commands run through nsenter.
	touch "$base.tmp/.rxedge-complete"
	rm -rf "$base"
	mv "$base.tmp" "$base"
else
	log "reusing the root filesystem in $base"
fi

work=$(mktemp -d /var/tmp/rxedge-container.XXXXXX)
name=rxedge-ci-$$
nspawn_pid=
cleanup() {
	local rc=$?
	if [[ -n $nspawn_pid ]] && kill -0 "$nspawn_pid" 2>/dev/null; then
		if [[ -n ${leader:-} ]]; then
			nsenter -t "$leader" -a systemctl poweroff --no-block >/dev/null 2>&1 || true
		fi
		for _ in $(seq 1 100); do
			kill -0 "$nspawn_pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$nspawn_pid" 2>/dev/null; then
			echo "systemd-container: the container did not power off within 20 s; killing it" >&2
			kill -KILL "$nspawn_pid" 2>/dev/null || true
		fi
		wait "$nspawn_pid" 2>/dev/null || true
	fi
	if [[ $rc != 0 && -f $work/console.log ]]; then
		echo "systemd-container: last lines of the container console:" >&2
		tail -n 40 "$work/console.log" >&2 || true
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT

log "building the agent, the test binary and the packages"
bin=$work/bin
mkdir -p "$bin"
vpkg=github.com/rxedge/agent/internal/version
export CGO_ENABLED=0
go build -trimpath -tags rxedge_nodev -ldflags "-X $vpkg.Version=1.0.0-itest" -o "$bin/rxedge-agent" ./cmd/agent
go build -trimpath -tags rxedge_nodev -ldflags "-X $vpkg.Version=1.0.1-itest" -o "$bin/rxedge-agent-new" ./cmd/agent
go test -c -o "$bin/installer.test" ./installer
if [[ -n ${DIST:-} && -d ${DIST} ]] && compgen -G "$DIST/*.deb" >/dev/null; then
	cp "$DIST"/*.deb "$bin/"
elif [[ -x scripts/package.sh ]]; then
	DIST=$bin/dist VERSION=1.0.0~itest PLATFORMS=linux/amd64 FORMATS=deb scripts/package.sh >"$work/package-1.log" 2>&1 ||
		{ cat "$work/package-1.log" >&2; die "scripts/package.sh failed"; }
	DIST=$bin/dist VERSION=1.0.1~itest PLATFORMS=linux/amd64 FORMATS=deb scripts/package.sh >"$work/package-2.log" 2>&1 ||
		{ cat "$work/package-2.log" >&2; die "scripts/package.sh failed"; }
	mv "$bin"/dist/*.deb "$bin/"
	rm -rf "$bin/dist"
fi

log "copying the root filesystem"
cp -a "$base" "$work/root"

log "booting $name"
systemd-nspawn -D "$work/root" --boot --register=no --keep-unit --private-network \
	--console=passive -M "$name" --bind-ro="$bin:/opt/rxedge-ci" >"$work/console.log" 2>&1 &
nspawn_pid=$!

# The container's PID 1 is a child of systemd-nspawn whose pid inside its
# own namespace is 1.
leader=
deadline=$((SECONDS + boot_timeout))
while [[ -z $leader ]]; do
	kill -0 "$nspawn_pid" 2>/dev/null || die "systemd-nspawn exited before the container booted"
	for c in /proc/[0-9]*; do
		[[ -r $c/status ]] || continue
		ppid=$(awk '$1 == "PPid:" { print $2 }' "$c/status" 2>/dev/null) || continue
		[[ $ppid == "$nspawn_pid" ]] || continue
		ns=$(awk '$1 == "NSpid:" { print $NF }' "$c/status" 2>/dev/null) || continue
		if [[ $ns == 1 ]]; then leader=${c#/proc/}; break; fi
	done
	[[ -n $leader ]] && break
	((SECONDS < deadline)) || die "no container PID 1 within ${boot_timeout}s"
	sleep 0.1
done
inside() { nsenter -t "$leader" -a "$@"; }

state=$(timeout "$boot_timeout" nsenter -t "$leader" -a systemctl is-system-running --wait 2>&1) || true
case $state in
running | degraded) log "booted: $state" ;;
*)
	inside systemctl --failed --no-pager >&2 || true
	die "the container did not finish booting within ${boot_timeout}s (state: ${state:-none})"
	;;
esac
if [[ $state == degraded ]]; then
	inside systemctl --failed --no-pager || true
fi

log "running the install integration test inside"
debs=() hqdeb=
for d in "$bin"/rxedge-agent_*.deb; do [[ -e $d ]] && debs+=("/opt/rxedge-ci/${d##*/}"); done
for d in "$bin"/rxedge-hq_*.deb; do [[ -e $d ]] && hqdeb=/opt/rxedge-ci/${d##*/}; done
inside env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
	RXEDGE_TEST_INSTALL=1 \
	RXEDGE_TEST_AGENT=/opt/rxedge-ci/rxedge-agent \
	RXEDGE_TEST_AGENT_NEW=/opt/rxedge-ci/rxedge-agent-new \
	RXEDGE_TEST_DEBS="${debs[*]}" \
	RXEDGE_TEST_HQ_DEB="$hqdeb" \
	/opt/rxedge-ci/installer.test -test.run 'TestInstallIntegration|TestPackageIntegration|TestHQPackageIntegration' -test.v -test.count=1 -test.timeout "$test_timeout"
log "passed"
