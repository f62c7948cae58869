#!/usr/bin/env bash
# Peak memory of the gateway under what a client or an upstream can make it hold,
# each scenario in a fresh gateway process (peak RSS = VmHWM at its end):
#
#   idle       the shipped routes against a held upstream, no traffic;
#   submits    CONNS (256: one key's max_concurrent_requests) concurrent worst-case
#              valid submits (every string at its maxLength, every array at its
#              maxItems: ~600 kB each), held by the upstream until its submit timeout;
#   refused    CONNS concurrent bodies at the body limit made of short strings (a
#              JSON array of ~150,000 one-character strings each), refused by the
#              schema;
#   hostile    TASKS tasks on an upstream whose every status answer is as large as an
#              answer may be (10,000 URLs, 100 KiB code and message), each queried:
#              what is kept and cached stays bounded.
#
# A measurement, not a test: it prints a table (and writes it to target/memory.md).
# Loopback only; everything it starts is stopped at the end.
#
#   benches/memory.sh                 # CONNS=256 TASKS=2000 PROFILE=release
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh

CONNS=${CONNS:-256}
TASKS=${TASKS:-2000}
PROFILE=${PROFILE:-release}
mkdir -p target
WORK=$(mktemp -d /tmp/mediagate-memory.XXXXXX)
KEY=sk-demo
SECRET=memory-task-secret-of-at-least-32-characters-$$
PIDS=()

cleanup() {
  stop_started
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

build_fault_tools

# An upstream in `mode`; prints its address.
upstream() {
  "$DIR/examples/fault_upstream" --listen 127.0.0.1:0 --mode "$1" --seconds 900 \
    >"$WORK/up-$1.out" 2>&1 &
  PIDS+=($!)
  wait_for "$WORK/up-$1.out" "listening on" | awk '{print $3}'
}

# The shipped routes.toml with the simulator replaced by the upstream at $1, on a
# free port, without a per-key rate (the burst is the point), the ledger in $WORK.
routes() {
  sed -e "s|base_url = \"builtin:simulator\"|base_url = \"http://$1\"|" \
      -e 's|^listen = "127.0.0.1:8080"|listen = "127.0.0.1:0"|' \
      -e 's|^rate_per_second = 100 |rate_per_second = 0 |' \
      -e 's|^secret_env = .*|secret_env = "MEMORY_TASK_SECRET"|' \
      routes.toml >"$WORK/routes-$2.toml"
}

# Start a gateway on routes-$1.toml; sets GW_PID and GW_ADDR.
gateway() {
  MEMORY_TASK_SECRET=$SECRET RUST_LOG=warn,mediagate=info \
    "$MEDIAGATE" serve --config "$WORK/routes-$1.toml" >/dev/null 2>"$WORK/gw-$1.log" &
  GW_PID=$!
  PIDS+=($GW_PID)
  GW_ADDR=$(wait_for "$WORK/gw-$1.log" "listening on http://" | sed 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/')
}

stop_gateway() { kill "$GW_PID" 2>/dev/null || true; wait "$GW_PID" 2>/dev/null || true; }

# --- bodies ---------------------------------------------------------------------------
repeat() { head -c "$2" /dev/zero | tr '\0' "$1"; }
URL="\"data:image/png;base64,$(repeat A $((32768 - 22)))\""
list() { local n=$1 out=""; for _ in $(seq 1 "$n"); do out="$out,$URL"; done; echo "[${out#,}]"; }
PROMPT=$(python3 -c 'print("\U0001D54F" * 10000)' 2>/dev/null || repeat x 10000)
printf '{"model":"deltaq3-pro","prompt":"%s","duration":16,"aspect_ratio":"16:9","resolution":"1080p","generate_audio":true,"first_image":%s,"last_image":%s,"reference_images":%s,"reference_videos":%s,"reference_audios":%s}' \
  "$PROMPT" "$URL" "$URL" "$(list 9)" "$(list 3)" "$(list 3)" >"$WORK/worst.json"
# ~260,000 one-character strings: just under the 1 MiB body limit.
{ printf '{"model":"deltaq3-pro","prompt":"p","reference_images":["a"'
  repeat x 261000 | sed 's/x/,"a"/g'
  printf ']}'; } >"$WORK/short-strings.json"
log "worst valid submit: $(wc -c <"$WORK/worst.json") bytes; short strings: $(wc -c <"$WORK/short-strings.json") bytes"

AUTH="Authorization: Bearer $KEY"
JSON="Content-Type: application/json"
declare -A PEAK RSS_AFTER NOTE

# --- idle and held submits ------------------------------------------------------------
HOLD=$(upstream hold)
routes "$HOLD" hold
gateway hold
sleep 1
PEAK[idle]=$(status_kb "$GW_PID" VmHWM)
NOTE[idle]="no traffic"
log "submits: $CONNS concurrent worst-case submits, held upstream"
$LOADGEN burst --addr "$GW_ADDR" --conns "$CONNS" --method POST --path /v2/model-center/tasks \
  --header "$AUTH" --header "$JSON" --body-file "$WORK/worst.json" --seconds 30 >"$WORK/burst.out" &
BURST=$!
# The provider's submit timeout (10 s) ends them; sample while they are held.
MAX_RSS=0
for _ in $(seq 1 16); do
  sleep 0.5
  r=$(status_kb "$GW_PID" VmRSS); (( r > MAX_RSS )) && MAX_RSS=$r
done
wait "$BURST" || true
PEAK[submits]=$(status_kb "$GW_PID" VmHWM)
RSS_AFTER[submits]=$(status_kb "$GW_PID" VmRSS)
NOTE[submits]="$(wc -c <"$WORK/worst.json") B each, held at the upstream; highest RSS sampled while held $((MAX_RSS / 1024)) MiB; after the submit timeout: $(cat "$WORK/burst.out")"
stop_gateway

# --- refused bodies of short strings ---------------------------------------------------
routes "$HOLD" refused
gateway refused
log "refused: $CONNS concurrent bodies of short strings"
$LOADGEN burst --addr "$GW_ADDR" --conns "$CONNS" --method POST --path /v2/model-center/tasks \
  --header "$AUTH" --header "$JSON" --body-file "$WORK/short-strings.json" --seconds 60 >"$WORK/refused.out"
PEAK[refused]=$(status_kb "$GW_PID" VmHWM)
RSS_AFTER[refused]=$(status_kb "$GW_PID" VmRSS)
NOTE[refused]="$(wc -c <"$WORK/short-strings.json") B each; $(cat "$WORK/refused.out")"
stop_gateway

# --- a hostile upstream, every task queried -------------------------------------------
HOSTILE=$(upstream hostile)
routes "$HOSTILE" hostile
gateway hostile
log "hostile: $TASKS tasks, each status answer as large as allowed"
printf '{"model":"deltaq3-pro","prompt":"a fox"}' >"$WORK/small.json"
IDS=()
for i in $(seq 1 "$TASKS"); do
  id=$(curl -s -H "$AUTH" -H "$JSON" --data-binary @"$WORK/small.json" \
    "http://$GW_ADDR/v2/model-center/tasks" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  [[ -n $id ]] && IDS+=("$id")
done
printf '%s\n' "${IDS[@]}" | sed "s|^|http://$GW_ADDR/v2/model-center/tasks/|" >"$WORK/urls.txt"
ANSWER_BYTES=$(curl -s -H "$AUTH" "$(head -1 "$WORK/urls.txt")" | wc -c)
xargs -P 8 -n 50 curl -s -H "$AUTH" <"$WORK/urls.txt" >/dev/null
PEAK[hostile]=$(status_kb "$GW_PID" VmHWM)
RSS_AFTER[hostile]=$(status_kb "$GW_PID" VmRSS)
NOTE[hostile]="${#IDS[@]} tasks queried and cached; each client answer $ANSWER_BYTES B"
stop_gateway

# --- report ---------------------------------------------------------------------------
{
  echo "## Memory run of $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Machine: $(nproc) CPUs, $(cpu_model). mediagate $(git rev-parse --short HEAD 2>/dev/null || echo '?'), profile $PROFILE. CONNS=$CONNS TASKS=$TASKS."
  echo
  echo "| scenario | peak RSS | RSS after | notes |"
  echo "|---|---|---|---|"
  for s in idle submits refused hostile; do
    echo "| $s | $(( ${PEAK[$s]} / 1024 )) MiB | $(( ${RSS_AFTER[$s]:-${PEAK[$s]}} / 1024 )) MiB | ${NOTE[$s]} |"
  done
} | tee target/memory.md
