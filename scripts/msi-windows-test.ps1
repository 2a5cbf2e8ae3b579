# The MSI on a real Windows (the GitHub Actions Windows job; elevated):
# install with the public properties, the service started with its recovery
# actions and ACLs, a central (hq hub) and movements ingested with the
# token, status through the control pipe, a stop, a major upgrade keeping
# config and data, an uninstall keeping the data, and an uninstall with
# DELETE_DATA=1 removing it. Exit 0 when every check passes.
#
#   .\scripts\msi-windows-test.ps1 -Old dist\rxedge-agent_0.0.1_windows_amd64.msi -New dist\rxedge-agent_0.0.2_windows_amd64.msi -Hub hub.exe
#
# -Hub is head office's binary (hq, built for Windows from cmd/hq) run as
# `hq hub`, the central.
param(
    [Parameter(Mandatory = $true)][string]$Old,
    [Parameter(Mandatory = $true)][string]$New,
    [Parameter(Mandatory = $true)][string]$Hub
)
$ErrorActionPreference = "Stop"
$exe = Join-Path $env:ProgramFiles "RxEdge\rxedge-agent.exe"
$base = Join-Path $env:ProgramData "RxEdge"
$db = Join-Path $base "data\agent.db"
$work = Join-Path $env:RUNNER_TEMP "rxedge-msi"
New-Item -ItemType Directory -Force -Path $work | Out-Null
if ((Test-Path $base) -or (Get-Service rxedge-agent -ErrorAction SilentlyContinue)) {
    Write-Host "msi-windows-test: FAIL: $base or the service exists already; run on a machine without the agent"
    exit 1
}

function Fail($msg) { Write-Host "msi-windows-test: FAIL: $msg"; exit 1 }
function Step($msg) { Write-Host "msi-windows-test: $msg" }

# Msi runs msiexec and waits for it; a non-zero exit fails the test.
function Msi([string[]]$msiArgs, [string]$log) {
    $p = Start-Process msiexec.exe -ArgumentList ($msiArgs + @("/qn", "/l*v", (Join-Path $work $log))) -Wait -PassThru
    if ($p.ExitCode -ne 0) {
        Get-Content (Join-Path $work $log) -Tail 60
        Fail "msiexec $($msiArgs -join ' ') exited $($p.ExitCode)"
    }
}

# WaitService waits (deadline 60 s) for the service to reach a state.
function WaitService([string]$state) {
    $deadline = (Get-Date).AddSeconds(60)
    while ((Get-Date) -lt $deadline) {
        $s = Get-Service rxedge-agent -ErrorAction SilentlyContinue
        if ($s -and "$($s.Status)" -eq $state) { return }
        Start-Sleep -Milliseconds 500
    }
    Fail "service rxedge-agent not $state within 60 s"
}

function Status() {
    $out = & $exe status --json
    return ($out -join "`n") | ConvertFrom-Json
}

Step "central: hq hub on 127.0.0.1:4222"
$hub = Start-Process (Resolve-Path $Hub) -ArgumentList @("hub", "--store-dir", (Join-Path $work "central"), "--listen", "127.0.0.1:4222") -PassThru -NoNewWindow

Step "install $Old with STORE_ID, NATS_URL and the intakes (HL7_LISTEN, ASAP_DIR, FORMULARY)"
$asap = Join-Path $work "asap"
New-Item -ItemType Directory -Force $asap | Out-Null
$formulary = Join-Path $work "formulary.csv"
Set-Content -Path $formulary -Value "ndc,schedule,unit`n12345-6789-01,,EA" -Encoding ascii
Msi @("/i", (Resolve-Path $Old), "STORE_ID=S0107", "NATS_URL=nats://127.0.0.1:4222",
    "HL7_LISTEN=127.0.0.1:2575", "ASAP_DIR=$asap", "FORMULARY=$formulary") "install.log"
WaitService "Running"
$cfg = Get-Content (Join-Path $base "agent.yaml") -Raw
foreach ($want in @("127.0.0.1:2575", $asap, $formulary)) {
    if (-not $cfg.Contains($want)) { Fail "agent.yaml lacks $want from the MSI's properties" }
}
$tcp = New-Object System.Net.Sockets.TcpClient
try { $tcp.Connect("127.0.0.1", 2575) } catch { Fail "the HL7 listener of HL7_LISTEN does not answer: $($_.Exception.Message)" } finally { $tcp.Close() }
Step "the intakes from the MSI's properties are in agent.yaml, and HL7 listens"
if (-not (Test-Path $exe)) { Fail "$exe missing" }
$svc = Get-CimInstance Win32_Service -Filter "Name='rxedge-agent'"
if ($svc.StartName -ne "NT SERVICE\rxedge-agent") { Fail "service account $($svc.StartName)" }
if ($svc.PathName -notlike '"*rxedge-agent.exe" run --config "*agent.yaml"') { Fail "image path $($svc.PathName) (unquoted?)" }
$reg = Get-ItemProperty HKLM:\SYSTEM\CurrentControlSet\Services\rxedge-agent
if ($reg.DelayedAutostart -ne 1) { Fail "delayed automatic start not set" }
if (-not (Test-Path HKLM:\SYSTEM\CurrentControlSet\Services\EventLog\Application\rxedge-agent)) { Fail "no Event Log source" }
$qf = (sc.exe qfailure rxedge-agent) -join "`n"
if ($qf -notmatch "RESTART") { Fail "no restart recovery actions:`n$qf" }
$acl = (Get-Acl (Join-Path $base "data")).Access | ForEach-Object { $_.IdentityReference.Value }
if ($acl -match "Users|Everyone") { Fail "data directory readable by users: $($acl -join ', ')" }
if (-not ($acl -match "rxedge-agent")) { Fail "data directory ACL lacks the service: $($acl -join ', ')" }
Step "service running as $($svc.StartName); recovery set; data ACL: $($acl -join ', ')"

Step "ingest 50 movements with the token"
$token = (Get-Content (Join-Path $base "ingest.token") -Raw).Trim()
$lines = 0..49 | ForEach-Object { '{"movement_id":"msi-' + $_ + '","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-01-02T03:04:05Z"}' }
$r = Invoke-RestMethod -Method Post -Uri http://127.0.0.1:8717/v1/movements -Headers @{ Authorization = "Bearer $token" } -ContentType "application/x-ndjson" -Body ($lines -join "`n")
if ($r.accepted -ne 50) { Fail "accepted $($r.accepted) of 50" }
try {
    Invoke-RestMethod -Method Post -Uri http://127.0.0.1:8717/v1/movements -ContentType "application/x-ndjson" -Body $lines[0] | Out-Null
    Fail "a movement without the token was accepted"
} catch { if ($_.Exception.Response.StatusCode.value__ -ne 401) { Fail "without the token: $($_.Exception.Message)" } }

$deadline = (Get-Date).AddSeconds(60)
do {
    $st = Status
    if ($st.counts.synced.total -eq 50) { break }
    Start-Sleep -Milliseconds 500
} while ((Get-Date) -lt $deadline)
if (-not $st.agent.running) { Fail "status through the control pipe: agent not running" }
if ($st.counts.synced.total -ne 50) { Fail "synced $($st.counts.synced.total) of 50 within 60 s" }
Step "status through the control pipe: synced 50"

Step "stop"
Stop-Service rxedge-agent
WaitService "Stopped"
$st = Status
if ($st.agent.running -or $st.counts.synced.total -ne 50) { Fail "after the stop: running $($st.agent.running), synced $($st.counts.synced.total)" }

Step "upgrade to $New (no properties: config and data kept)"
Start-Service rxedge-agent
WaitService "Running"
$tokenBefore = $token
Msi @("/i", (Resolve-Path $New)) "upgrade.log"
WaitService "Running"
$v = (& $exe version) -join " "
if ($v -notmatch "0\.0\.2") { Fail "version after the upgrade: $v" }
if ((Get-Content (Join-Path $base "ingest.token") -Raw).Trim() -ne $tokenBefore) { Fail "the upgrade replaced the ingest token" }
$st = Status
if ($st.counts.synced.total -ne 50) { Fail "after the upgrade: synced $($st.counts.synced.total), want 50" }
Step "upgraded: $v; token and 50 synced movements kept"

Step "uninstall (data kept)"
Msi @("/x", (Resolve-Path $New)) "uninstall.log"
if (Get-Service rxedge-agent -ErrorAction SilentlyContinue) { Fail "service still registered" }
if (Test-Path $exe) { Fail "$exe still there" }
if (-not (Test-Path $db)) { Fail "$db removed by uninstall" }
if (-not (Test-Path (Join-Path $base "agent.yaml"))) { Fail "config removed by uninstall" }

Step "install again, then uninstall with DELETE_DATA=1"
Msi @("/i", (Resolve-Path $New)) "reinstall.log"
WaitService "Running"
$st = Status
if ($st.counts.synced.total -ne 50) { Fail "reinstall over kept data: synced $($st.counts.synced.total), want 50" }
Msi @("/x", (Resolve-Path $New), "DELETE_DATA=1") "uninstall-delete.log"
if (Test-Path $base) { Fail "$base still there after DELETE_DATA=1" }

Stop-Process -Id $hub.Id -ErrorAction SilentlyContinue
Step "PASS"
