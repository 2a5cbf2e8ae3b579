#!/usr/bin/env bash
# Builds the installable packages into dist/:
#   rxedge-agent_<version>_<arch>.deb and rxedge-agent-<version>.<arch>.rpm
#     (nfpm, packaging/nfpm.yaml): /usr/bin/rxedge-agent, the systemd unit
#     (packaging/rxedge-agent.service), the rxedge user and directories;
#     config and data are kept on upgrade and removal, and an upgrade
#     restarts a running service;
#   rxedge-hq_<version>_<arch>.deb and rxedge-hq-<version>.<arch>.rpm
#     (nfpm, packaging/nfpm-hq.yaml): head office's /usr/bin/rxedge-hq,
#     hq run's unit (packaging/rxedge-hq.service, not enabled), its
#     example settings and PostgreSQL grants; Linux only (no MSI);
#   rxedge-agent_<version>_windows_amd64.zip: rxedge-agent.exe with
#     install.ps1 and uninstall.ps1 for hand installs;
#   rxedge-agent_<version>_windows_amd64.msi (wixl from Debian's wixl
#     package, packaging/windows/rxedge-agent.wxs): the Windows Installer
#     package for SCCM, Intune and GPO; its version is the numeric part of
#     <version> (MSI versions are three numbers). Left out, with a note,
#     when wixl or msibuild (msitools) is missing.
#
# The store's agent is built with the tag rxedge_nodev: an installed
# agent carries no development hub, so no NATS server.
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

# msi_version prints the leading numbers of a version as MSI takes them:
# three dot-separated numbers (0.4.1~rc1 -> 0.4.1, 2 -> 2.0.0).
msi_version() {
	local v=${1%%[!0-9.]*} a b c
	IFS=. read -r a b c _ <<<"$v"
	printf '%d.%d.%d' "${a:-0}" "${b:-0}" "${c:-0}"
}

mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

for p in $platforms; do
	os=${p%/*} arch=${p#*/}
	ext=
	[[ $os == windows ]] && ext=.exe
	bin=$build/$os-$arch/rxedge-agent$ext
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -tags rxedge_nodev -ldflags "-s -w -X $vpkg.Version=$version" -o "$bin" ./cmd/agent
	case $os in
	linux)
		hq=$build/$os-$arch/rxedge-hq
		CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w -X $vpkg.Version=$version" -o "$hq" ./cmd/hq
		# nfpm expands variables in some fields only: fill them all here.
		for pkg in agent:nfpm.yaml:$bin hq:nfpm-hq.yaml:$hq; do
			IFS=: read -r name conf binary <<<"$pkg"
			sed -e "s|\${ARCH}|$arch|g" -e "s|\${VERSION}|$version|g" -e "s|\${BINARY}|$binary|g" \
				"packaging/$conf" >"$build/nfpm-$name-$arch.yaml"
			for f in $formats; do
				"${nfpm[@]}" package --config "$build/nfpm-$name-$arch.yaml" --packager "$f" --target "$dist/"
			done
		done
		;;
	windows)
		cp packaging/windows/install.ps1 packaging/windows/uninstall.ps1 "$build/$os-$arch/"
		zip="$dist/rxedge-agent_${version}_${os}_${arch}.zip"
		rm -f "$zip"
		(cd "$build/$os-$arch" && zip -q -X "$zip" rxedge-agent.exe install.ps1 uninstall.ps1)
		echo "created package: $zip"
		if command -v wixl >/dev/null && command -v msibuild >/dev/null; then
			msi="$dist/rxedge-agent_${version}_${os}_${arch}.msi"
			msiver=$(msi_version "$version")
			cp packaging/windows/rxedge-agent.wxs "$build/$os-$arch/"
			(cd "$build/$os-$arch" && wixl -a x64 -D "Version=$msiver" -D Binary=rxedge-agent.exe -o "$msi" rxedge-agent.wxs)
			# wixl has no Secure attribute: make the public properties secure
			# (passed to the elevated install) next to the ones wixl adds.
			msibuild "$msi" -q "UPDATE \`Property\` SET \`Value\` = 'WIX_DOWNGRADE_DETECTED;WIX_UPGRADE_DETECTED;STORE_ID;NATS_URL;CREDS_FILE;TOKEN_FILE;CA_FILE;HL7_LISTEN;HL7_ALLOWED_HOSTS;ASAP_DIR;FORMULARY;OPERATOR_KEYS;DELETE_DATA' WHERE \`Property\` = 'SecureCustomProperties'"
			# The product code is new with every build (Product Id="*"): msiexec /x
			# and an Intune detection rule take it, so say it.
			code=$(msiinfo export "$msi" Property | tr -d '\r' | awk -F'\t' '$1 == "ProductCode" { print $2 }')
			echo "created package: $msi (version $msiver, product code $code)"
		else
			echo "package: wixl or msibuild missing (Debian: apt-get install wixl msitools): no .msi" >&2
		fi
		;;
	esac
done
(cd "$dist" && sha256sum -- *.deb *.rpm *.zip *.msi 2>/dev/null >SHA256SUMS.packages || true)
