#!/bin/sh
# After rxedge-hq's files are in place (install and upgrade, deb and rpm):
# systemd learns the sink's unit, which stays disabled until head office
# enables it (README, "Head office's records in PostgreSQL"); an upgrade
# restarts a running sink on the new binary, and a stopped one stays
# stopped. /etc/rxedge, where the sink's settings go, is made when
# missing; an existing one (the store's package makes it 0750) is left
# as it is.
set -e
if [ ! -d /etc/rxedge ]; then
	install -d -m 0755 /etc/rxedge
fi
if [ -d "${RXEDGE_SYSTEMD_RUN:-/run/systemd/system}" ]; then
	systemctl daemon-reload
	systemctl try-restart rxedge-sink.service
fi
