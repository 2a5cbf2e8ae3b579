# Stops and removes the RxEdge agent service. The config, the ingest token
# and the data (%ProgramData%\RxEdge, with any unsynced movement) are kept.
$ErrorActionPreference = "Stop"
$exe = Join-Path (Join-Path $env:ProgramFiles "RxEdge") "rxedge-agent.exe"
& $exe uninstall
exit $LASTEXITCODE
