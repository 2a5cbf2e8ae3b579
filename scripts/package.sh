#!/usr/bin/env bash
# Builds the installable packages into dist/:
#   rxedge-agent_<version>_<arch>.deb and rxedge-agent-<version>.<arch>.rpm
#     (nfpm, packaging/nfpm.yaml): /usr/bin/rxedge-agent, the systemd unit
#     (packaging/rxedge-agent.service), the rxedge user and directories;
#     config and data are kept on upgrade and removal, and an upgrade
#     restarts a running service;
#   rxedge-agent_<version>_windows_amd64.zip: rxedge-agent.exe with
#     install.ps1 and uninstall.ps1 for unattended installs (SCCM, Intune).
#
# VERSION defaults to `git describe --tags`; a leading "v" is dropped and a
# version that does not start with a digit becomes 0.0.0~<version>, as deb
# and rpm need. PLATFORMS ("os/arch ...") and FORMATS ("deb rpm") narrow
# the build; DIST overrides the output directory. nfpm runs through the Go
# module proxy (go run), nothing else is downloaded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dist=${DIST:-dist}
platforms=${PLATFORMS:-"linux/amd64 linux/arm64 windows/amd64"}
formats=${FORMATS:-"deb rpm"}
nfpm=(go run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2)
vpkg=github.com/rxedge/agent/internal/version

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || true)}
[[ -n $version ]] || { echo "package: cannot describe the commit; set VERSION" >&2; exit 1; }
version=${version#v}
[[ $version == [0-9]* ]] || version=0.0.0~$version
case $version in
*[!A-Za-z0-9.~+-]*) echo "package: VERSION '$version' has characters deb and rpm do not take" >&2; exit 1 ;;
esac

mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

for p in $platforms; do
	os=${p%/*} arch=${p#*/}
	ext=
	[[ $os == windows ]] && ext=.exe
	bin=$build/$os-$arch/rxedge-agent$ext
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w -X $vpkg.Version=$version" -o "$bin" ./cmd/agent
	case $os in
	linux)
		# nfpm expands variables in some fields only: fill them all here.
		sed -e "s|\${ARCH}|$arch|g" -e "s|\${VERSION}|$version|g" -e "s|\${BINARY}|$bin|g" \
			packaging/nfpm.yaml >"$build/nfpm-$arch.yaml"
		for f in $formats; do
			"${nfpm[@]}" package --config "$build/nfpm-$arch.yaml" --packager "$f" --target "$dist/"
		done
		;;
	windows)
		cp packaging/windows/install.ps1 packaging/windows/uninstall.ps1 "$build/$os-$arch/"
		zip="$dist/rxedge-agent_${version}_${os}_${arch}.zip"
		rm -f "$zip"
		(cd "$build/$os-$arch" && zip -q -X "$zip" rxedge-agent.exe install.ps1 uninstall.ps1)
		echo "created package: $zip"
		;;
	esac
done
(cd "$dist" && sha256sum -- *.deb *.rpm *.zip 2>/dev/null >SHA256SUMS.packages || true)
