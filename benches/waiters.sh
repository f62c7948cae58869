#!/usr/bin/env bash
# Long-poll waiters at scale (issue #34): N clients each waiting (`?wait=60`) on a task
# of its own, on 127.0.0.1 against the fast upstream (examples/fast_upstream.rs), ledger
# on SQLite, the tracker following the tasks.
#
#   benches/waiters.sh                  # 10,000 waiters, about a minute and a half
#   N=2000 benches/waiters.sh           # fewer
#   MEDIAGATE=path/to/mediagate benches/waiters.sh   # another build, to compare
#   KEEP_WORK=1 benches/waiters.sh      # keep the run's /tmp directory
#   SKIP_BUILD=1 benches/waiters.sh     # use the release build as it is
#
# One gateway, provider `fast` with `poll_interval_ms` = INTERVAL_MS (20,000) and
# `[tracker] max_interval_ms` the same: the tracker asks about each task every
# INTERVAL_MS, waiters or not, which is the baseline the waiters are measured against.
#
# 1. N tasks submitted (loadgen rate); the fast upstream keeps them `queued`. Once the
#    tracker follows them all and an interval has passed, QUIET seconds are measured
#    without waiters: the gateway's CPU (the baseline) and RSS.
# 2. N long-polls (`loadgen wait`: `?wait=60&status=queued`, one connection each).
#    Once `mediagate_connections_open` says N, QUIET seconds are measured again,
#    nothing changing: the CPU the waiters added, per waiter and second, and the
#    ledger statements they added (`mediagate_waiters_ledger_looks_total`); RSS
#    added per waiter.
# 3. The upstream completes every task within COMPLETE_MS (`/_complete`); the tracker
#    learns each at its next status request. Each waiter's wake-up latency: the
#    moment loadgen has its answer minus the ledger's `finished_ms` (the gateway
#    recording the end): p50, p99, max.
#
# Prints a Markdown report (also written to target/load/waiters.md). Needs sqlite3
# (installed with apt-get when missing) and `ulimit -n` above N + 100 (raised to the
# hard limit here).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh

N=${N:-10000}
INTERVAL_MS=${INTERVAL_MS:-20000}
QUIET=${QUIET:-10}                  # seconds measured without and with the waiters
COMPLETE_MS=${COMPLETE_MS:-2000}    # the upstream completes the tasks within this
SUBMIT_RATE=${SUBMIT_RATE:-5000}
OPEN_RATE=${OPEN_RATE:-1000}        # long-polls opened per second (each first asks the
                                    # provider about its task, as a query does)
OUT=target/load
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/mediagate-waiters.XXXXXX)
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

ulimit -n "$(ulimit -Hn)"
(( $(ulimit -n) > N + 100 )) || { echo "ulimit -n is $(ulimit -n): too few descriptors for $N waiters" >&2; exit 1; }
need_sqlite3
if [[ ${SKIP_BUILD:-} != 1 ]]; then
  log "building (release)"
  cargo build --release --quiet --bin mediagate --example fast_upstream --example loadgen
fi
BIN=${CARGO_TARGET_DIR:-target}/release
LOADGEN=$BIN/examples/loadgen
MEDIAGATE=${MEDIAGATE:-$BIN/mediagate}

$BIN/examples/fast_upstream --listen 127.0.0.1:0 >"$WORK/upstream.out" 2>&1 &
PIDS+=($!)
UP_ADDR=$(wait_for "$WORK/upstream.out" "listening on" | awk '{print $3}')

key_sha=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
cat >"$WORK/routes.toml" <<TOML
[ledger]
url = "sqlite://$LEDGER_DB"

[storage]
url = "none"

[tracker]
max_interval_ms = $INTERVAL_MS

[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
shutdown_grace_ms = 1000
max_connections = $(( N + 1000 ))
max_connections_per_ip = 0

[tasks]
secret_env = "MEDIAGATE_TASK_SECRET"

# Far above the requests made here.
$(unlimited)

[[keys]]
name = "bench"
sha256 = "$key_sha"

$(fast_provider "http://$UP_ADDR" "poll_interval_ms = $INTERVAL_MS")

$(bench_family "$MODEL")
TOML
MEDIAGATE_TASK_SECRET=$SECRET RUST_LOG=${RUST_LOG:-info} \
  "$MEDIAGATE" serve --config "$WORK/routes.toml" >/dev/null 2>"$WORK/gateway.log" &
MG_PID=$!
PIDS+=($MG_PID)
MG_ADDR=$(wait_for "$WORK/gateway.log" "listening on http://" | sed 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/')
MG_METRICS=$(wait_for "$WORK/gateway.log" "metrics listener on" | sed 's/.*metrics listener on http:\/\/\([0-9.:]*\).*/\1/')
log "fast upstream on $UP_ADDR; gateway on $MG_ADDR (metrics $MG_METRICS)"

CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
scrape() { curl -sf "http://$MG_METRICS/metrics"; }
val() { awk -v p="$2" 'index($0, p) == 1 { s += $NF } END { printf "%.0f", s }' "$1"; }
per() { awk -v a="$1" -v b="$2" -v f="${3:-1}" -v d="${4:-1}" 'BEGIN { if (b > 0) printf "%.*f", d, a * f / b; else print "-" }'; }
wait_until() { # $1 = what, $2 = seconds at most, then a command that succeeds when done
  local what=$1 limit=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@"; do
    (( $(date +%s) < end )) || { log "gave up waiting ($limit s): $what"; return 1; }
    sleep 1
  done
}
gauge_is() { scrape >"$WORK/m" && (( $(val "$WORK/m" "$1") >= $2 )); }
LOOKS='mediagate_waiters_ledger_looks_total'
# The gateway's CPU (µs), RSS (kB) and ledger looks over QUIET seconds.
quiet() {
  local c0 c1 l0 l1
  scrape >"$WORK/q0"; c0=$(cpu_ticks "$MG_PID")
  sleep "$QUIET"
  scrape >"$WORK/q1"; c1=$(cpu_ticks "$MG_PID")
  l0=$(val "$WORK/q0" "$LOOKS"); l1=$(val "$WORK/q1" "$LOOKS")
  echo "$(( (c1 - c0) * 1000000 / CLK_TCK )) $(status_kb "$MG_PID" VmRSS) $(( l1 - l0 ))"
}

# 1. N tasks, held queued; the baseline.
echo "$BODY" >"$WORK/body.json"
SECONDS_TO_SUBMIT=$(( (N + SUBMIT_RATE - 1) / SUBMIT_RATE ))
log "submitting $N tasks"
SUBMITTED=$($LOADGEN rate --addr "$MG_ADDR" --rate "$(( N / SECONDS_TO_SUBMIT ))" \
  --seconds "$SECONDS_TO_SUBMIT" --conns 64 --path "$TASKS" --header "$AUTH" \
  --method POST --body-file "$WORK/body.json" --header "Content-Type: application/json")
[[ $(echo "$SUBMITTED" | sed 's/.* failed=\([0-9]*\).*/\1/') == 0 ]] || { echo "submits failed: $SUBMITTED" >&2; exit 1; }
wait_until "the tracker follows $N tasks" 60 gauge_is 'mediagate_tracker_tasks{provider="fast"}' "$N"
sqlite3 -readonly "$LEDGER_DB" "SELECT task_id FROM tasks WHERE state = 'submitted'" >"$WORK/ids.txt"
(( $(wc -l <"$WORK/ids.txt") == N )) || { echo "the ledger has $(wc -l <"$WORK/ids.txt") unfinished tasks, not $N" >&2; exit 1; }
# Every task asked about once: the tracker's pace is steady from here on.
sleep $(( INTERVAL_MS / 1000 + 1 ))
log "measuring $QUIET s without waiters"
read -r CPU0 RSS0 LOOKS0 <<<"$(quiet)"

# 2. N waiters, nothing changing.
log "opening $N long-polls"
$LOADGEN wait --addr "$MG_ADDR" --path "$TASKS" --ids-file "$WORK/ids.txt" \
  --query "wait=60&status=queued" --header "$AUTH" --out "$WORK/answers.txt" --seconds 100 \
  --rate "$OPEN_RATE" --batch 50 \
  >"$WORK/wait.out" 2>&1 &
WAIT_PID=$!
PIDS+=($WAIT_PID)
wait_for "$WORK/wait.out" "waiting" >/dev/null
# A waiter whose first look at its task failed (the provider's accept queue overflowed)
# was answered at once: 99 % of them suffice, the rest counted in the report.
wait_until "$N connections open" $(( N / OPEN_RATE + 30 )) gauge_is 'mediagate_connections_open' $(( N * 99 / 100 )) || true
OPENED_AT=$(date +%s)
sleep 1
log "measuring $QUIET s with $N waiters"
read -r CPU1 RSS1 LOOKS1 <<<"$(quiet)"

# 3. Every task completes; each waiter's wake-up.
log "completing every task within $COMPLETE_MS ms"
curl -sf -X POST "http://$UP_ADDR/_complete?over_ms=$COMPLETE_MS" >/dev/null
wait "$WAIT_PID" || true
ANSWERED=$(tail -1 "$WORK/wait.out")
WAITED_S=$(( $(date +%s) - OPENED_AT ))
(( WAITED_S < 60 )) || log "the waits took $WAITED_S s: some may have ended at their 60 s, not at the change"
sqlite3 -readonly -separator ' ' "$LEDGER_DB" \
  "SELECT task_id, finished_ms FROM tasks WHERE finished_ms IS NOT NULL" | sort >"$WORK/finished.txt"
sort "$WORK/answers.txt" >"$WORK/answers.sorted"
# Wake-up: the answer read minus the end recorded, per task that changed.
join "$WORK/answers.sorted" "$WORK/finished.txt" \
  | awk '$3 != "queued" { print $2 - $4 }' | sort -n >"$WORK/wakes.txt"
pct() { awk -v p="$1" '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit } i = int(NR * p / 100); if (i < 1) i = 1; if (i > NR) i = NR; print v[i] }' "$WORK/wakes.txt"; }
WOKEN=$(wc -l <"$WORK/wakes.txt")

ADDED_CPU_US=$(( CPU1 - CPU0 ))
{
  echo "## Waiters run of $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Machine: $(nproc) CPUs, $(cpu_model), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r)."
  echo "Versions: mediagate $(git rev-parse --short HEAD 2>/dev/null || echo "?") ($MEDIAGATE), $(rustc --version)."
  echo "Command: \`benches/waiters.sh\` (N=$N INTERVAL_MS=$INTERVAL_MS QUIET=$QUIET COMPLETE_MS=$COMPLETE_MS)"
  echo
  echo "| measure | value |"
  echo "|---|---|"
  echo "| gateway CPU, $N tasks tracked, no waiters | $(per "$CPU0" "$QUIET" 0.001 1) ms/s |"
  echo "| gateway CPU, the same with $N waiters, nothing changing | $(per "$CPU1" "$QUIET" 0.001 1) ms/s |"
  echo "| CPU added per waiter | $(per "$ADDED_CPU_US" "$(( N * QUIET ))" 1 2) µs/s |"
  echo "| ledger looks for waiters, per second | $(per "$LOOKS0" "$QUIET" 1 1) without, $(per "$LOOKS1" "$QUIET" 1 1) with |"
  echo "| RSS without / with waiters | $(( RSS0 / 1024 )) / $(( RSS1 / 1024 )) MiB |"
  echo "| RSS added per waiter (connection included) | $(per $(( (RSS1 - RSS0) * 1024 )) "$N" 1 0) B |"
  echo "| waiters woken by the change | $WOKEN of $N ($ANSWERED) |"
  echo "| wake-up after the end is recorded, p50 / p99 / max | $(pct 50) / $(pct 99) / $(tail -1 "$WORK/wakes.txt") ms |"
} | tee "$OUT/waiters.md"
