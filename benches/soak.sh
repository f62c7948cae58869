#!/usr/bin/env bash
# Fault soak: the gateway (release build, shipped routes.toml, SQLite ledger) runs for
# DURATION seconds under a steady mix of submits and queries against an upstream that
# misbehaves on purpose (examples/fault_upstream.rs, mode `faults`): resets before and
# after the request, stalls past every timeout, 5xx and 429 bursts, truncated and
# non-JSON answers, slowly trickling bodies. A third of the way in it is reloaded
# (SIGHUP); two thirds in it is stopped gracefully (SIGTERM) and started again on the
# same port. Then it reports:
#
#   - answers per class (status, and the error code of each refusal);
#   - answers outside the error catalogue (must be 0) and panics in the log (must be 0);
#   - RSS and open file descriptors every SAMPLE seconds (bounded);
#   - tasks the upstream created and answered whole whose upstream id is not in the
#     ledger (must be 0; `mediagate tasks` lists the ledger rows).
#
# Loopback only; bounded in time; everything it starts is stopped at the end.
#
#   benches/soak.sh                       # DURATION=300 RATE=40 CONNS=32
#   DURATION=60 benches/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh

DURATION=${DURATION:-300}
RATE=${RATE:-40}
CONNS=${CONNS:-32}
SAMPLE=${SAMPLE:-5}
PROFILE=${PROFILE:-release}
STALL_MS=${STALL_MS:-15000}
(( DURATION >= 30 && DURATION <= 3600 )) || { echo "DURATION must be 30..3600" >&2; exit 2; }
mkdir -p target
WORK=$(mktemp -d /tmp/mediagate-soak.XXXXXX)
SECRET=soak-task-secret-of-at-least-32-characters-$$
KEY=sk-demo
PIDS=()

cleanup() {
  stop_started
  [[ -f $WORK/gw.pid ]] && kill "$(cat "$WORK/gw.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

build_fault_tools

# The error catalogue: every code of src/error.rs.
perl -0777 -ne 'while (/Self::new\(\s*StatusCode::\w+,\s*"[a-z_]+",\s*"([a-z_]+)"/g) { print "$1\n" }' \
  src/error.rs >"$WORK/codes.txt"
log "error catalogue: $(wc -l <"$WORK/codes.txt") codes"

# --- the faulty upstream ---------------------------------------------------------------
"$DIR/examples/fault_upstream" --listen 127.0.0.1:0 --mode faults --stall-ms "$STALL_MS" \
  --seconds $((DURATION + 300)) --ids-file "$WORK/created.txt" >"$WORK/upstream.out" 2>&1 &
PIDS+=($!)
UP=$(wait_for "$WORK/upstream.out" "listening on" | awk '{print $3}')
touch "$WORK/created.txt"

# --- the gateway ---------------------------------------------------------------------------
PORT=$(free_port)
sed -e "s|base_url = \"builtin:simulator\"|base_url = \"http://$UP\"|" \
    -e "s|^listen = \"127.0.0.1:8080\"|listen = \"127.0.0.1:$PORT\"|" \
    -e 's|^rate_per_second = 100 |rate_per_second = 0 |' \
    -e 's|^secret_env = .*|secret_env = "SOAK_TASK_SECRET"|' \
    -e 's|^shutdown_grace_ms = 30000|shutdown_grace_ms = 20000|' \
    routes.toml >"$WORK/routes.toml"
ADDR=127.0.0.1:$PORT
RUNS=0
start_gateway() {
  RUNS=$((RUNS + 1))
  SOAK_TASK_SECRET=$SECRET RUST_LOG=info "$MEDIAGATE" serve --config "$WORK/routes.toml" \
    >/dev/null 2>"$WORK/gw-$RUNS.log" &
  echo $! >"$WORK/gw.pid"
  wait_for "$WORK/gw-$RUNS.log" "listening on http://" >/dev/null
}
start_gateway
log "gateway on $ADDR, upstream on $UP; $DURATION s at $RATE requests/s"

# RSS and descriptors of whichever gateway process is running, every SAMPLE seconds.
(
  t0=$(date +%s)
  while true; do
    pid=$(cat "$WORK/gw.pid" 2>/dev/null || true)
    if [[ -n $pid && -r /proc/$pid/status ]]; then
      rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
      fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
      echo "$(( $(date +%s) - t0 )) $pid ${rss:-0} $fds"
    fi
    sleep "$SAMPLE"
  done
) >"$WORK/samples.txt" &
PIDS+=($!)

# --- the traffic -------------------------------------------------------------------------
printf '{"model":"deltaq3-pro","prompt":"a red fox running through fresh snow","duration":5,"resolution":"720p"}' \
  >"$WORK/body.json"
$LOADGEN mix --addr "$ADDR" --rate "$RATE" --seconds "$DURATION" --conns "$CONNS" \
  --method POST --path /v2/model-center/tasks --body-file "$WORK/body.json" \
  --header "Authorization: Bearer $KEY" --header "Content-Type: application/json" \
  --codes-file "$WORK/codes.txt" --submit-percent 30 >"$WORK/mix.json" &
MIX=$!
PIDS+=($MIX)

sleep $((DURATION / 3))
log "reload (SIGHUP)"
kill -HUP "$(cat "$WORK/gw.pid")"
wait_for "$WORK/gw-$RUNS.log" "configuration reloaded" >/dev/null

sleep $((DURATION / 3))
log "graceful restart (SIGTERM, then start again)"
OLD=$(cat "$WORK/gw.pid")
RESTART_T0=$(date +%s%N)
kill -TERM "$OLD"
while kill -0 "$OLD" 2>/dev/null; do sleep 0.1; done
wait "$OLD" 2>/dev/null && EXIT_CODE=0 || EXIT_CODE=$?
start_gateway
RESTART_MS=$(( ($(date +%s%N) - RESTART_T0) / 1000000 ))

wait "$MIX" || true
log "traffic over; stopping the gateway gracefully"
LAST=$(cat "$WORK/gw.pid")
kill -TERM "$LAST"
while kill -0 "$LAST" 2>/dev/null; do sleep 0.1; done
rm -f "$WORK/gw.pid"

# --- the checks ---------------------------------------------------------------------------
SOAK_TASK_SECRET=$SECRET "$MEDIAGATE" --config "$WORK/routes.toml" tasks --limit 1000000 \
  >"$WORK/ledger.tsv"
cut -f7 "$WORK/ledger.tsv" | tail -n +2 | grep -v '^-$' | sort -u >"$WORK/ledger-ids.txt" || true
sort -u "$WORK/created.txt" >"$WORK/created-ids.txt"
MISSING=$(comm -23 "$WORK/created-ids.txt" "$WORK/ledger-ids.txt" | wc -l)
PANICS=$(cat "$WORK"/gw-*.log | grep -c "panicked" || true)
STATES=$(tail -n +2 "$WORK/ledger.tsv" | cut -f3 | sort | uniq -c | awk '{printf "%s %s, ", $2, $1}')
UPSTREAM_STATS=$(curl -s "http://$UP/_stats" || echo '{}')

{
  echo "## Soak run of $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Machine: $(nproc) CPUs, $(cpu_model). mediagate $(git rev-parse --short HEAD 2>/dev/null || echo '?'), profile $PROFILE."
  echo "Command: \`benches/soak.sh\` (DURATION=$DURATION RATE=$RATE CONNS=$CONNS STALL_MS=$STALL_MS)"
  echo
  echo "Client view (\`loadgen mix\`):"
  echo
  echo '```json'
  cat "$WORK/mix.json"
  echo '```'
  echo
  echo "| check | result |"
  echo "|---|---|"
  echo "| answers outside the error catalogue | $(sed -n 's/.*"outside_catalogue":\([0-9]*\).*/\1/p' "$WORK/mix.json") |"
  echo "| panics in the gateway's log | $PANICS |"
  echo "| upstream ids answered whole but not in the ledger | $MISSING (of $(wc -l <"$WORK/created-ids.txt") created; ledger rows: $(($(wc -l <"$WORK/ledger.tsv") - 1))) |"
  echo "| ledger rows by state | ${STATES%, } |"
  echo "| graceful stop exit code / restart time | $EXIT_CODE / $RESTART_MS ms |"
  echo "| faults served by the upstream | \`$UPSTREAM_STATS\` |"
  echo
  echo "RSS and open descriptors (every ${SAMPLE} s; a new pid after the restart):"
  echo
  echo "| t (s) | pid | RSS (MiB) | fds |"
  echo "|---|---|---|---|"
  awk '{printf "| %s | %s | %.1f | %s |\n", $1, $2, $3 / 1024, $4}' "$WORK/samples.txt"
  echo
  awk '{ if ($3 > m) m = $3; if ($4 > f) f = $4 } END { printf "Peak RSS %.1f MiB, peak descriptors %d.\n", m / 1024, f }' "$WORK/samples.txt"
} | tee target/soak.md
