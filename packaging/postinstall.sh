#!/bin/sh
# After the package's files are in place (install and upgrade, deb and rpm):
# the service user and directories, then systemd. The config and the ingest
# token are written by `rxedge-agent install --store-id ... --nats ...`;
# the unit starts only once the config exists.
set -e
if ! getent passwd rxedge >/dev/null 2>&1; then
	useradd --system --user-group --no-create-home --home-dir /var/lib/rxedge --shell /usr/sbin/nologin rxedge
fi
install -d -m 0750 -o root -g rxedge /etc/rxedge
install -d -m 0750 -o rxedge -g rxedge /var/lib/rxedge
# The ASAP drop folder (intake.asap.dir: /var/lib/rxedge/asap): the service
# owns it; the pharmacy software writes into it as a member of the rxedge
# group (setgid, so what it writes stays in the group). The unit's
# ReadWritePaths covers it.
install -d -m 2770 -o rxedge -g rxedge /var/lib/rxedge/asap /var/lib/rxedge/asap/done /var/lib/rxedge/asap/rejected
# A first installation is deb "configure" with no previous version, or rpm
# 1; anything else is an upgrade, which keeps the administrator's choice of
# enabled or disabled.
first=false
case "$1" in
configure) [ -z "${2:-}" ] && first=true ;;
1) first=true ;;
esac
if [ -d "${RXEDGE_SYSTEMD_RUN:-/run/systemd/system}" ]; then
	systemctl daemon-reload
	if [ "$first" = true ]; then
		systemctl enable rxedge-agent.service >/dev/null 2>&1 || true
	fi
	# An upgrade restarts a running agent on the new binary; a stopped one
	# stays stopped.
	systemctl try-restart rxedge-agent.service
fi
