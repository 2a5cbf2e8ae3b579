#!/bin/sh
# After rxedge-hq's files are in place (install and upgrade, deb and rpm):
# systemd learns hq run's unit, which stays disabled until head office
# enables it (docs/headoffice.md, "The head-office service: hq run"); an upgrade
# restarts a running service on the new binary, and a stopped one stays
# stopped. /etc/rxedge, where the settings go, is made when missing; an
# existing one (the store's package makes it 0750) is left as it is;
# /etc/rxedge/hq.credentials (0700), where the service's passwords and
# keys go, is made when missing.
#
# Earlier versions shipped the sink's own unit, rxedge-sink.service, which
# this package replaces: a sink still running from it is left running
# (its copy of the archives goes on), and what to do is printed: move its
# settings to hq.yaml, stop it, enable rxedge-hq.
set -e
if [ ! -d /etc/rxedge ]; then
	install -d -m 0755 /etc/rxedge
fi
if [ ! -d /etc/rxedge/hq.credentials ]; then
	install -d -m 0700 /etc/rxedge/hq.credentials
fi
if [ -d "${RXEDGE_SYSTEMD_RUN:-/run/systemd/system}" ]; then
	systemctl daemon-reload
	systemctl try-restart rxedge-hq.service
	if systemctl is-active --quiet rxedge-sink.service 2>/dev/null; then
		echo "rxedge-hq: rxedge-sink.service is no longer shipped; the sink it runs goes on until stopped." >&2
		echo "rxedge-hq: move to hq run: write /etc/rxedge/hq.yaml (/usr/share/rxedge/hq.yaml.example; the sink's settings are its postgres and nats sections)," >&2
		echo "rxedge-hq: then: systemctl disable --now rxedge-sink.service; systemctl enable --now rxedge-hq.service (docs/headoffice.md, \"Moving from rxedge-sink\")" >&2
	fi
fi
