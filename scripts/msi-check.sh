#!/usr/bin/env bash
# Lists the tables of the agent's MSI that say what it installs (msiinfo,
# from Debian's msitools) and checks what they must hold:
#   ServiceInstall   rxedge-agent, own process, automatic start, account
#                    NT SERVICE\rxedge-agent, `run --config` the ProgramData
#                    config (quoted: the path may have spaces)
#   ServiceControl   stop on install and uninstall (so an upgrade stops the
#                    service before files are replaced), start on install,
#                    delete on uninstall, waiting for each (event 163)
#   Directory        Program Files\RxEdge, ProgramData\RxEdge\data
#   Property         STORE_ID NATS_URL CREDS_FILE TOKEN_FILE CA_FILE
#                    HL7_LISTEN HL7_ALLOWED_HOSTS ASAP_DIR FORMULARY
#                    OPERATOR_KEYS DELETE_DATA secure, each but DELETE_DATA
#                    passed to ConfigureAgent; the upgrade code; the product
#                    code printed (msiexec /x takes it)
#   CustomAction and InstallExecuteSequence
#                    the old version removed before anything is installed;
#                    ConfigureAgent (install --msi) after InstallServices and
#                    before StartServices; DeleteData only on an uninstall
#                    that is not an upgrade and only with DELETE_DATA=1
# Usage: scripts/msi-check.sh path/to/rxedge-agent.msi
set -euo pipefail
msi=${1:?usage: msi-check.sh FILE.msi}
die() { echo "msi-check: FAIL: $*" >&2; exit 1; }
table() { msiinfo export "$msi" "$1" | tr -d '\r' | tail -n +4; }

for t in ServiceInstall ServiceControl Directory Property CustomAction; do
	echo "--- $t"
	table "$t"
done
echo "--- InstallExecuteSequence (in order)"
seq=$(table InstallExecuteSequence | sort -t$'\t' -k3 -n)
echo "$seq"

# row TABLE KEY prints the row whose first column is KEY; field TABLE KEY N
# its Nth column (empty columns count: read would merge the tabs).
row() { table "$1" | awk -F'\t' -v k="$2" '$1 == k'; }
field() { row "$1" "$2" | awk -F'\t' -v n="$3" '{ print $n }'; }
order() { echo "$seq" | awk -F'\t' -v a="$1" '$1 == a { print $3 }'; }

name=$(field ServiceInstall AgentService 2) type=$(field ServiceInstall AgentService 4) start=$(field ServiceInstall AgentService 5)
errctl=$(field ServiceInstall AgentService 6) account=$(field ServiceInstall AgentService 9)
args=$(field ServiceInstall AgentService 11) comp=$(field ServiceInstall AgentService 12)
[[ $name == rxedge-agent && $type == 16 && $start == 2 && $errctl == 1 ]] || die "ServiceInstall: name $name type $type start $start error control $errctl"
[[ $account == 'NT SERVICE\rxedge-agent' ]] || die "ServiceInstall: account $account"
[[ $args == 'run --config "[CommonAppDataFolder]RxEdge\agent.yaml"' ]] || die "ServiceInstall: arguments $args"
[[ $comp == Agent ]] || die "ServiceInstall: component $comp"

name=$(field ServiceControl AgentServiceControl 2) event=$(field ServiceControl AgentServiceControl 3)
wait=$(field ServiceControl AgentServiceControl 5) comp=$(field ServiceControl AgentServiceControl 6)
# msidbServiceControlEvent: start 1 + stop 2 on install, stop 32 + delete 128 on uninstall = 163.
[[ $name == rxedge-agent && $event == 163 && $wait == 1 && $comp == Agent ]] || die "ServiceControl: name $name event $event wait $wait"

row Directory INSTALLDIR | grep -q $'\tProgramFiles64Folder\tRxEdge$' || die "Directory: INSTALLDIR is not Program Files\\RxEdge"
row Directory CONFIGDIR | grep -q $'\tCommonAppDataFolder\tRxEdge$' || die "Directory: CONFIGDIR is not ProgramData\\RxEdge"
row Directory DATADIR | grep -q $'\tCONFIGDIR\tdata$' || die "Directory: DATADIR is not ProgramData\\RxEdge\\data"

secure=$(row Property SecureCustomProperties | cut -f2)
for p in STORE_ID NATS_URL CREDS_FILE TOKEN_FILE CA_FILE HL7_LISTEN HL7_ALLOWED_HOSTS ASAP_DIR FORMULARY OPERATOR_KEYS DELETE_DATA WIX_UPGRADE_DETECTED; do
	[[ ";$secure;" == *";$p;"* ]] || die "Property: $p is not in SecureCustomProperties ($secure)"
done
row Upgrade '{1A3839C6-4D1C-442E-911E-22A78162DEFE}' | grep -q WIX_UPGRADE_DETECTED || die "Upgrade: no major-upgrade row for the upgrade code"

ca=$(row CustomAction ConfigureAgent | cut -f4)
[[ $ca == 'install --msi --store-id "[STORE_ID]" --nats "[NATS_URL]" --creds "[CREDS_FILE]" --token-file "[TOKEN_FILE]" --ca-file "[CA_FILE]" --hl7-listen "[HL7_LISTEN]" --hl7-allowed-hosts "[HL7_ALLOWED_HOSTS]" --asap-dir "[ASAP_DIR]" --formulary "[FORMULARY]" --operator-keys "[OPERATOR_KEYS]"' ]] || die "ConfigureAgent: $ca"
# Each property the install takes reaches the agent's install as its flag.
for pf in STORE_ID:--store-id NATS_URL:--nats CREDS_FILE:--creds TOKEN_FILE:--token-file CA_FILE:--ca-file HL7_LISTEN:--hl7-listen \
	HL7_ALLOWED_HOSTS:--hl7-allowed-hosts ASAP_DIR:--asap-dir FORMULARY:--formulary OPERATOR_KEYS:--operator-keys; do
	[[ $ca == *"${pf#*:} \"[${pf%%:*}]\""* ]] || die "ConfigureAgent: ${pf%%:*} is not passed as ${pf#*:}"
done
# Type 3090 = 18 (exe from an installed file) + deferred (1024) + no impersonation (2048); no "continue on error" bit (64).
[[ $(row CustomAction ConfigureAgent | cut -f2) == 3090 ]] || die "ConfigureAgent: not a deferred, elevated, checked action"

(($(order RemoveExistingProducts) < $(order InstallInitialize))) || die "RemoveExistingProducts runs after InstallInitialize"
(($(order InstallServices) < $(order ConfigureAgent) && $(order ConfigureAgent) < $(order StartServices))) ||
	die "ConfigureAgent is not between InstallServices and StartServices"
(($(order DeleteServices) < $(order DeleteData) && $(order DeleteData) < $(order RemoveFiles))) || die "DeleteData is not right after DeleteServices"
cond=$(echo "$seq" | awk -F'\t' '$1 == "DeleteData" { print $2 }')
[[ $cond == *'NOT UPGRADINGPRODUCTCODE'* && $cond == *'DELETE_DATA="1"'* && $cond == *'REMOVE~="ALL"'* ]] || die "DeleteData condition: $cond"
code=$(row Property ProductCode | cut -f2)
[[ $code =~ ^\{[0-9A-F-]{36}\}$ ]] || die "Property: ProductCode $code"
echo "msi-check: PASS: $(basename "$msi"), $(stat -c %s "$msi") bytes, ProductVersion $(row Property ProductVersion | cut -f2), ProductCode $code, UpgradeCode $(row Property UpgradeCode | cut -f2)"
