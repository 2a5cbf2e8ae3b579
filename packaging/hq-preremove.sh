#!/bin/sh
# Before rxedge-hq's files go: on removal (deb "remove", rpm 0) stop and
# disable hq run's unit, and an earlier version's sink unit if one is
# still there; on an upgrade (deb "upgrade", rpm 1) leave it running,
# postinstall restarts it on the new binary. Its settings, credentials
# and state, and the database, are never touched.
set -e
case "$1" in
remove | 0)
	if [ -d "${RXEDGE_SYSTEMD_RUN:-/run/systemd/system}" ]; then
		systemctl disable --now rxedge-hq.service >/dev/null 2>&1 || true
		systemctl disable --now rxedge-sink.service >/dev/null 2>&1 || true
	fi
	;;
esac
