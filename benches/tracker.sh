#!/usr/bin/env bash
# The background tracker at 10,000 and 100,000 unfinished tasks (issue #34), on
# 127.0.0.1 against the fast upstream (examples/fast_upstream.rs), ledger on SQLite.
#
#   benches/tracker.sh                  # both sizes, about 4 minutes
#   SIZES=10000 benches/tracker.sh      # one size
#   MEDIAGATE=path/to/mediagate benches/tracker.sh   # another build, to compare
#   KEEP_WORK=1 benches/tracker.sh      # keep the run's /tmp directory (logs, configs,
#                                       # the ledger)
#   PERF=1 benches/tracker.sh           # perf samples the gateway while each size is
#                                       # measured: target/load/tracker-perf-N.txt
#
# One gateway follows every size in turn: provider `fast` with `poll_interval_ms` =
# INTERVAL_MS (5,000) and `[tracker] max_interval_ms` the same (so that every task is
# asked about every INTERVAL_MS, unchanged answers or not), `poll_max_in_flight` as
# shipped. For each size N:
#
# 1. A forwarded query's CPU: a second gateway (poll cache off, tracker off) answers
#    queries of an unfinished task at the rate the tracker should reach, N per
#    interval (loadgen rate, FORWARD_SECONDS), from 64 connections and from 8 (as
#    many requests in flight as the tracker's `poll_max_in_flight`).
# 2. N tasks submitted through the gateway (loadgen rate); the fast upstream keeps
#    them `queued`. Once `mediagate_tracker_tasks` says N and an interval has passed,
#    MEASURE seconds are measured: status requests per second (the gateway's counter,
#    the upstream's beside it) against N per interval, the gateway's CPU per status
#    request, its RSS per task, the tracker's ledger statements per status request,
#    its poll delay and `mediagate_tracker_behind_seconds`.
# 3. The fast upstream completes every task within one interval (`/_complete`), each
#    at a moment known from its upstream id; once the ledger has them all, each
#    task's lag is its `finished_ms` (the gateway recording it) minus that moment:
#    p50, p99 and the largest.
#
# Prints a Markdown report (also written to target/load/tracker.md). Needs sqlite3
# (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh

SIZES=${SIZES:-"10000 100000"}
INTERVAL_MS=${INTERVAL_MS:-5000}
MEASURE=${MEASURE:-20}             # seconds measured at each size
FORWARD_SECONDS=${FORWARD_SECONDS:-10}
SUBMIT_RATE=${SUBMIT_RATE:-10000}  # submits per second while the tasks are made
OUT=target/load
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/mediagate-tracker.XXXXXX)
LEDGER_DB=$WORK/ledger.db
KEY=sk-bench
SECRET=bench-task-secret-of-at-least-32-characters-$$
AUTH="Authorization: Bearer $KEY"
MODEL=bench-video
TASKS=/v2/model-center/tasks
BODY='{"model":"bench-video","prompt":"a red fox running through fresh snow at dawn, cinematic","duration":5}'
PIDS=()

cleanup() {
  stop_started
  wait 2>/dev/null || true
  remove_work
}
trap cleanup EXIT

need_sqlite3
log "building (release)"
cargo build --release --quiet --bin mediagate --example fast_upstream --example loadgen
BIN=${CARGO_TARGET_DIR:-target}/release
LOADGEN=$BIN/examples/loadgen
MEDIAGATE=${MEDIAGATE:-$BIN/mediagate}

# --- the fast upstream: tasks queued for an hour unless completed by /_complete -----
$BIN/examples/fast_upstream --listen 127.0.0.1:0 >"$WORK/upstream.out" 2>&1 &
UP_PID=$!
PIDS+=($UP_PID)
UP_ADDR=$(wait_for "$WORK/upstream.out" "listening on" | awk '{print $3}')
upstream_queries() { curl -sf "http://$UP_ADDR/_stats" | sed 's/.*"queries":\([0-9]*\).*/\1/'; }

# --- the gateways ------------------------------------------------------------------
key_sha=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
routes() { # $1 = ledger url, $2 = tracker enabled, $3 = poll cache ttl (ms)
  cat <<EOF
[ledger]
url = "$1"

[storage]
url = "none"

[tracker]
enabled = $2
max_interval_ms = $INTERVAL_MS

[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
shutdown_grace_ms = 1000
max_connections_per_ip = 0

[tasks]
secret_env = "MEDIAGATE_TASK_SECRET"
poll_cache_ttl_ms = $3

# Far above the submits made here.
$(unlimited)

[[keys]]
name = "bench"
sha256 = "$key_sha"

$(fast_provider "http://$UP_ADDR" "poll_interval_ms = $INTERVAL_MS")

$(bench_family "$MODEL")
EOF
}

start_gateway() { # $1 = name, then routes' arguments; sets ADDR and METRICS
  local name=$1; shift
  routes "$@" >"$WORK/$name.toml"
  MEDIAGATE_TASK_SECRET=$SECRET RUST_LOG=${RUST_LOG:-info} \
    "$MEDIAGATE" serve --config "$WORK/$name.toml" >/dev/null 2>"$WORK/$name.log" &
  PIDS+=($!)
  echo $! >"$WORK/$name.pid"
  ADDR=$(wait_for "$WORK/$name.log" "listening on http://" | sed 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/')
  METRICS=$(wait_for "$WORK/$name.log" "metrics listener on" | sed 's/.*metrics listener on http:\/\/\([0-9.:]*\).*/\1/')
}
start_gateway tracked "sqlite://$LEDGER_DB" true 1000
MG_ADDR=$ADDR MG_METRICS=$METRICS MG_PID=$(cat "$WORK/tracked.pid")
start_gateway forwarding none false 0
FW_ADDR=$ADDR FW_PID=$(cat "$WORK/forwarding.pid")
log "fast upstream on $UP_ADDR; tracking gateway on $MG_ADDR (metrics $MG_METRICS); forwarding gateway on $FW_ADDR"

CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
now_ms() { date +%s%3N; }
scrape() { curl -sf "http://$MG_METRICS/metrics"; }
# The sum of the samples of FILE whose series starts with PREFIX.
val() { awk -v p="$2" 'index($0, p) == 1 { s += $NF } END { printf "%.6f", s }' "$1"; }
per() { awk -v a="$1" -v b="$2" -v f="${3:-1}" -v d="${4:-1}" 'BEGIN { if (b > 0) printf "%.*f", d, a * f / b; else print "-" }'; }
REQS='mediagate_tracker_status_requests_total{provider="fast"'
TRACKED='mediagate_tracker_tasks{provider="fast"}'
BEHIND='mediagate_tracker_behind_seconds{provider="fast"}'
STATEMENTS='mediagate_tracker_ledger_statements_total{'
DELAY_SUM='mediagate_tracker_poll_delay_seconds_sum{provider="fast"}'
DELAY_COUNT='mediagate_tracker_poll_delay_seconds_count{provider="fast"}'
GAP_SUM='mediagate_tracker_finish_gap_seconds_sum{provider="fast"}'
GAP_COUNT='mediagate_tracker_finish_gap_seconds_count{provider="fast"}'

echo "$BODY" >"$WORK/body.json"
FW_TASK=$(curl -sf -X POST "http://$FW_ADDR$TASKS" -H "$AUTH" -H 'Content-Type: application/json' \
  -d "$BODY" | sed 's/.*"id":"\([^"]*\)".*/\1/')
curl -sf "http://$FW_ADDR$TASKS/$FW_TASK" -H "$AUTH" | grep -q '"queued"' \
  || { echo "the forwarded task does not read as queued" >&2; exit 1; }

wait_until() { # $1 = what, $2 = seconds at most, then a command that succeeds when done
  local what=$1 limit=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@"; do
    (( $(date +%s) < end )) || { log "gave up waiting ($limit s): $what"; return 1; }
    sleep 1
  done
}
tracked_is() { scrape >"$WORK/m" && [[ $(val "$WORK/m" "$TRACKED" | cut -d. -f1) == "$1" ]]; }
unfinished_in_ledger() { sqlite3 -readonly "$LEDGER_DB" "SELECT COUNT(*) FROM tasks WHERE state = 'submitted'"; }
none_unfinished() { [[ $(unfinished_in_ledger) == 0 ]]; }

ROWS=()
RSS_AT=()
for N in $SIZES; do
  ALLOWED=$(( N * 1000 / INTERVAL_MS ))
  # 1. A forwarded query's CPU, at the rate the tracker should reach.
  forwarded() { # $1 = connections; prints "CPU µs per query, failed"
    local c0 c1 out n
    c0=$(cpu_ticks "$FW_PID")
    out=$($LOADGEN rate --addr "$FW_ADDR" --rate "$ALLOWED" --seconds "$FORWARD_SECONDS" \
      --conns "$1" --path "$TASKS/$FW_TASK" --header "$AUTH")
    c1=$(cpu_ticks "$FW_PID")
    echo "$N forwarded, $1 connections: $out" >>"$WORK/loadgen.log"
    n=$(echo "$out" | sed 's/.*requests=\([0-9]*\).*/\1/')
    echo "$(per $(( c1 - c0 )) "$n" "$(( 1000000 / CLK_TCK ))") $(echo "$out" | sed 's/.* failed=\([0-9]*\).*/\1/')"
  }
  log "$N: forwarded queries at $ALLOWED/s for $FORWARD_SECONDS s, from 64 and 8 connections"
  read -r FW_CPU FW_FAILED <<<"$(forwarded 64)"
  read -r FW8_CPU FW8_FAILED <<<"$(forwarded 8)"

  # 2. N tasks, held queued.
  RSS0=$(status_kb "$MG_PID" VmRSS)
  DB0=$(stat -c %s "$LEDGER_DB")
  START_MS=$(now_ms)
  SECONDS_TO_SUBMIT=$(( (N + SUBMIT_RATE - 1) / SUBMIT_RATE ))
  log "$N: submitting $N tasks"
  SUBMITTED=$($LOADGEN rate --addr "$MG_ADDR" --rate "$(( N / SECONDS_TO_SUBMIT ))" \
    --seconds "$SECONDS_TO_SUBMIT" --conns 64 --path "$TASKS" --header "$AUTH" \
    --method POST --body-file "$WORK/body.json" --header "Content-Type: application/json")
  echo "$N submits: $SUBMITTED" >>"$WORK/loadgen.log"
  SUBMIT_FAILED=$(echo "$SUBMITTED" | sed 's/.* failed=\([0-9]*\).*/\1/')
  [[ $SUBMIT_FAILED == 0 ]] || { echo "$SUBMIT_FAILED submits failed: $SUBMITTED" >&2; exit 1; }
  SUBMIT_END=$(date +%s)
  wait_until "the gauge says $N tasks" 60 tracked_is "$N"
  # Every task has been asked about at least once: the polls are spread as the
  # submits were.
  settle=$(( SUBMIT_END + INTERVAL_MS / 1000 + 2 - $(date +%s) ))
  if (( settle > 0 )); then sleep "$settle"; fi

  log "$N: measuring $MEASURE s"
  if [[ ${PERF:-} == 1 ]]; then
    perf record -F 999 -g -p "$MG_PID" -o "$WORK/perf-$N.data" -- sleep "$MEASURE" 2>/dev/null &
    PERF_PID=$!
  fi
  scrape >"$WORK/m0"; q0=$(upstream_queries); c0=$(cpu_ticks "$MG_PID")
  BEHIND_MAX=0
  for _ in $(seq 1 "$MEASURE"); do
    sleep 1
    scrape >"$WORK/m"
    BEHIND_MAX=$(awk -v a="$BEHIND_MAX" -v b="$(val "$WORK/m" "$BEHIND")" 'BEGIN { print (b > a ? b : a) }')
  done
  scrape >"$WORK/m1"; q1=$(upstream_queries); c1=$(cpu_ticks "$MG_PID")
  RSS1=$(status_kb "$MG_PID" VmRSS)
  if [[ ${PERF:-} == 1 ]]; then
    wait "$PERF_PID" || true
    perf report -i "$WORK/perf-$N.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null \
      | grep -v -e '^#' -e '^$' | sed -n 1,60p >"$OUT/tracker-perf-$N.txt"
  fi
  DB1=$(stat -c %s "$LEDGER_DB")
  d() { awk -v a="$(val "$WORK/m1" "$1")" -v b="$(val "$WORK/m0" "$1")" 'BEGIN { printf "%.6f", a - b }'; }
  SENT=$(d "$REQS")
  RATE=$(per "$SENT" "$MEASURE" 1 0)
  UP_RATE=$(per $(( q1 - q0 )) "$MEASURE" 1 0)
  POLL_CPU=$(per $(( c1 - c0 )) "$SENT" "$(( 1000000 / CLK_TCK ))")
  CORES=$(per $(( c1 - c0 )) $(( MEASURE * CLK_TCK )) 1 2)
  STATEMENTS_PER=$(per "$(d "$STATEMENTS")" "$SENT" 1 4)
  DELAY_MS=$(per "$(d "$DELAY_SUM")" "$(d "$DELAY_COUNT")" 1000 1)
  RSS_PER=$(per $(( (RSS1 - RSS0) * 1024 )) "$N" 1 0)
  RSS_AT+=("$N $RSS1")
  DB_PER=$(per $(( DB1 - DB0 )) "$N" 1 0)

  # 3. Every task completed upstream within one interval; the lag of each.
  log "$N: completing every task within $INTERVAL_MS ms"
  scrape >"$WORK/m2"
  FLIP=$(curl -sf -X POST "http://$UP_ADDR/_complete?over_ms=$INTERVAL_MS")
  AT=$(echo "$FLIP" | sed 's/.*"at_ms":\([0-9]*\).*/\1/')
  LEARNT=ok
  wait_until "the ledger has every task finished" 180 none_unfinished || LEARNT="not all"
  scrape >"$WORK/m3"
  GAP_MS=$(per "$(awk -v a="$(val "$WORK/m3" "$GAP_SUM")" -v b="$(val "$WORK/m2" "$GAP_SUM")" 'BEGIN { print a - b }')" \
    "$(awk -v a="$(val "$WORK/m3" "$GAP_COUNT")" -v b="$(val "$WORK/m2" "$GAP_COUNT")" 'BEGIN { print a - b }')" 1000 0)
  # The upstream completed the task created at c (ms, in its id) at
  # AT + (c % W) * 7919 % W; the gateway knew it at finished_ms.
  LAGS=$(sqlite3 -readonly -separator ' ' "$LEDGER_DB" "
    WITH t AS (
      SELECT finished_ms, CAST(substr(upstream_id, 5, instr(substr(upstream_id, 5), '-') - 1) AS INTEGER) AS c
      FROM tasks WHERE created_ms >= $START_MS AND state = 'completed'),
    l AS (SELECT finished_ms - ($AT + (c % $INTERVAL_MS) * 7919 % $INTERVAL_MS) AS lag FROM t)
    SELECT COUNT(*),
      (SELECT lag FROM l ORDER BY lag LIMIT 1 OFFSET (SELECT COUNT(*) * 50 / 100 FROM l)),
      (SELECT lag FROM l ORDER BY lag LIMIT 1 OFFSET (SELECT COUNT(*) * 99 / 100 FROM l)),
      MAX(lag), MIN(lag) FROM l")
  read -r LAG_N LAG_P50 LAG_P99 LAG_MAX LAG_MIN <<<"$LAGS"
  ROWS+=("| $N | $ALLOWED | $RATE ($UP_RATE upstream) | $(per "$RATE" "$ALLOWED" 1 2) | $CORES | $POLL_CPU | $FW_CPU / $FW8_CPU ($(( FW_FAILED + FW8_FAILED )) failed) | $(per "$POLL_CPU" "$FW_CPU" 1 2) / $(per "$POLL_CPU" "$FW8_CPU" 1 2) | $LAG_P50 / $LAG_P99 / $LAG_MAX ($LAG_N of $N, $LEARNT) | $GAP_MS | $DELAY_MS | $BEHIND_MAX | $RSS_PER | $DB_PER | $STATEMENTS_PER |")
  log "$N: ${ROWS[-1]}"
  [[ $LAG_MIN -ge 0 ]] || log "a negative lag ($LAG_MIN ms): the ledger and the upstream disagree"
done

{
  echo "## Tracker run of $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Machine: $(nproc) CPUs, $(cpu_model), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r)."
  echo "Versions: mediagate $(git rev-parse --short HEAD 2>/dev/null || echo "?") ($MEDIAGATE), $(rustc --version)."
  echo "Command: \`benches/tracker.sh\` (SIZES=\"$SIZES\" INTERVAL_MS=$INTERVAL_MS MEASURE=$MEASURE FORWARD_SECONDS=$FORWARD_SECONDS SUBMIT_RATE=$SUBMIT_RATE)"
  echo
  echo "Allowed: tasks per interval ($INTERVAL_MS ms). CPU in µs per request (user + system, the whole gateway); a forwarded query's at the allowed rate, poll cache off, from 64 / 8 connections; the ratio is the status request's to each. Lag: the ledger's \`finished_ms\` minus the upstream's completion, ms. Gap: \`mediagate_tracker_finish_gap_seconds\`, mean. Delay: \`mediagate_tracker_poll_delay_seconds\`, mean. Behind: the largest \`mediagate_tracker_behind_seconds\` seen. RSS and ledger file growth per task from before the submits to the end of the measure. Statements: the tracker's, every kind (\`mediagate_tracker_ledger_statements_total\`), per status request."
  echo
  echo "| tasks | allowed req/s | status req/s | achieved / allowed | gateway cores | CPU µs per status request | CPU µs per forwarded query | ratio | lag p50 / p99 / max ms | gap ms | delay ms | behind s | RSS B per task | ledger B per task | statements per poll |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  for r in "${RSS_AT[@]}"; do set -- $r; echo "RSS following $1 tasks: $(( $2 / 1024 )) MiB."; done
  if (( ${#RSS_AT[@]} > 1 )); then
    set -- ${RSS_AT[0]} ${RSS_AT[-1]}
    echo "RSS per task between the first and the last size (what the submits left behind cancels out): $(per $(( ($4 - $2) * 1024 )) $(( $3 - $1 )) 1 0) bytes."
  fi
} | tee "$OUT/tracker.md"
