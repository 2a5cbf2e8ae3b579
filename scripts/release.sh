#!/usr/bin/env bash
# Builds the release binaries into dist/:
#   dist/rxedge-agent_<version>_<os>_<arch>[.exe]   the store's agent, for
#     linux/amd64, linux/arm64 and windows/amd64, with the tag rxedge_nodev
#     (no development hub, so no NATS server);
#   dist/rxedge-hq_<version>_linux_<arch>           head office's, for the
#     Linux platforms only (head office runs Linux);
#   dist/SHA256SUMS
# statically linked (CGO_ENABLED=0), with the version, commit and build
# date stamped into internal/version (shown by `version` of either).
#
# VERSION defaults to `git describe --tags --always --dirty`; set it to
# override. PLATFORMS overrides the platform list ("os/arch ..."). DIST
# overrides the output directory. SOURCE_DATE_EPOCH, when set, fixes the
# build date (reproducible builds).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

pkg=github.com/rxedge/agent/internal/version
dist=${DIST:-dist}
platforms=${PLATFORMS:-"linux/amd64 linux/arm64 windows/amd64"}

if [[ -z ${VERSION:-} ]]; then
	VERSION=$(git describe --tags --always --dirty 2>/dev/null) || {
		echo "release: cannot describe the commit (not a git checkout, or no commits yet); set VERSION" >&2
		exit 1
	}
fi
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n ${SOURCE_DATE_EPOCH:-} ]]; then
	date=$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null ||
		date -u -r "${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)
else
	date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
fi

case $VERSION in
*[!A-Za-z0-9._+-]*)
	echo "release: VERSION '$VERSION' has characters unsafe in a file name; use letters, digits and . _ + -" >&2
	exit 1
	;;
esac

ldflags="-s -w -X ${pkg}.Version=${VERSION} -X ${pkg}.Commit=${commit} -X ${pkg}.Date=${date}"

mkdir -p "$dist"
files=()
for platform in $platforms; do
	os=${platform%/*}
	arch=${platform#*/}
	ext=
	[[ $os == windows ]] && ext=.exe
	out="rxedge-agent_${VERSION}_${os}_${arch}${ext}"
	echo "release: building $out" >&2
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -tags rxedge_nodev -ldflags "$ldflags" -o "$dist/$out" ./cmd/agent
	files+=("$out")
	[[ $os == linux ]] || continue
	out="rxedge-hq_${VERSION}_${os}_${arch}"
	echo "release: building $out" >&2
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$dist/$out" ./cmd/hq
	files+=("$out")
done

(
	cd "$dist"
	if command -v sha256sum >/dev/null; then
		sha256sum -- "${files[@]}" >SHA256SUMS
	else
		shasum -a 256 -- "${files[@]}" >SHA256SUMS
	fi
)
echo "release: $VERSION ($commit, $date) in $dist/:" >&2
cat "$dist/SHA256SUMS" >&2
