#!/bin/sh
# Before the package's files go: on removal (deb "remove", rpm 0) stop and
# disable the service; on an upgrade (deb "upgrade", rpm 1) leave it
# running, postinstall restarts it on the new binary. The config, the token
# and the data (with any unsynced movement) are never removed.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now rxedge-agent.service >/dev/null 2>&1 || true
	fi
	;;
esac
