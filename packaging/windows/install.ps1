# Installs the RxEdge agent as a Windows service, unattended (SCCM, Intune
# Win32 app, or by hand from an elevated PowerShell):
#
#   .\install.ps1 -StoreId S0107 -Nats nats://central.chain:4222 -CredsFile C:\secure\S0107.creds
#
# It stops a running rxedge-agent service (an upgrade) and waits until it
# stopped, copies rxedge-agent.exe to %ProgramFiles%\RxEdge, runs
# `rxedge-agent install` with the same flags (which writes the config and a
# fresh ingest token readable only by administrators and the service, and
# checks the config as the agent does), starts the service and runs
# `rxedge-agent doctor`. Exit code: 0 ready, 3 installed but not ready,
# anything else failed.
#
# -AsapDir DIR creates the ASAP drop folder (with done\ and rejected\) with
# the service's permissions: SYSTEM and Administrators full control, the
# service's account NT SERVICE\rxedge-agent modify, and -AsapWriter (the
# account the pharmacy software writes files as) modify. Then set
# intake.asap.dir (and intake.formulary) in the config and restart.
param(
    [Parameter(Mandatory = $true)][string]$StoreId,
    [string]$Nats = "",
    [string]$CredsFile = "",
    [string]$NkeySeedFile = "",
    [string]$NatsUser = "",
    [string]$PasswordFile = "",
    [string]$CaFile = "",
    [string]$AsapDir = "",
    [string]$AsapWriter = ""
)
$ErrorActionPreference = "Stop"
$dir = Join-Path $env:ProgramFiles "RxEdge"
$exe = Join-Path $dir "rxedge-agent.exe"
New-Item -ItemType Directory -Force -Path $dir | Out-Null
# An upgrade: the running service holds its .exe open (Windows refuses to
# replace it, or a half-copied binary would start). Stop it and wait until
# it has stopped; the start below runs the new binary.
$svc = Get-Service -Name "rxedge-agent" -ErrorAction SilentlyContinue
if ($svc -and $svc.Status -ne "Stopped") {
    Stop-Service -Name "rxedge-agent" -Force
    $svc.WaitForStatus("Stopped", [TimeSpan]::FromSeconds(60))
}
Copy-Item -Force (Join-Path $PSScriptRoot "rxedge-agent.exe") $exe

$installArgs = @("install", "--store-id", $StoreId)
if ($Nats) { $installArgs += @("--nats", $Nats) }
if ($CredsFile) { $installArgs += @("--creds", $CredsFile) }
if ($NkeySeedFile) { $installArgs += @("--nkey-seed", $NkeySeedFile) }
if ($NatsUser) { $installArgs += @("--nats-user", $NatsUser, "--password-file", $PasswordFile) }
if ($CaFile) { $installArgs += @("--ca-file", $CaFile) }

& $exe @installArgs
if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }

if ($AsapDir) {
    foreach ($d in @($AsapDir, (Join-Path $AsapDir "done"), (Join-Path $AsapDir "rejected"))) {
        New-Item -ItemType Directory -Force -Path $d | Out-Null
    }
    $grants = @("*S-1-5-18:(OI)(CI)F", "*S-1-5-32-544:(OI)(CI)F", "NT SERVICE\rxedge-agent:(OI)(CI)M")
    if ($AsapWriter) { $grants += "${AsapWriter}:(OI)(CI)M" }
    $icaclsArgs = @($AsapDir, "/inheritance:r")
    foreach ($g in $grants) { $icaclsArgs += @("/grant:r", $g) }
    & icacls @icaclsArgs | Out-Null
    if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
}
& $exe start
if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
& $exe doctor
exit $LASTEXITCODE
