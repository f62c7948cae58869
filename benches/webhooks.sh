#!/usr/bin/env bash
# A webhook backlog (issue #34): N deliveries owed to RECEIVERS receivers
# (examples/webhook_receivers.rs, ports of 127.0.0.1), drained by one gateway, ledger on
# SQLite. Run twice: every receiver answering after ANSWER_MS, then the same with
# receiver 0 answering after SLOW_MS (10 s: as long as `[webhooks] timeout_ms`) and
# receiver 1 never answering.
#
#   benches/webhooks.sh                 # 20,000 deliveries, about two minutes
#   N=100000 benches/webhooks.sh        # the full backlog of issue #34
#   MEDIAGATE=path/to/mediagate benches/webhooks.sh   # another build, to compare
#   KEEP_WORK=1 benches/webhooks.sh     # keep the run's /tmp directory
#   SKIP_BUILD=1 benches/webhooks.sh    # use the release build as it is
#
# The deliveries are written into the ledger before the gateway starts (its schema
# made by a first start): N finished tasks of one key, task i's callback going to
# receiver i % RECEIVERS, each owed since that moment. `[webhooks]` as shipped
# (`max_in_flight` 32, `timeout_ms` 10 s, cool-downs from 5 s) except
# `max_in_flight_per_key` = `max_in_flight`, as docs/configuration.md advises for a
# single key sending webhooks. For each run:
#
# - drain: from the gateway's start to the last post a healthy receiver took; its
#   rate against the most the pool allows (`max_in_flight` posts every ANSWER_MS) and
#   against the first run's;
# - the healthy receivers' posts, each timed from the gateway's start: p50, p99, max
#   (the delay the slow and the dead receivers add to everyone else's is the second
#   run's against the first's);
# - what the slow and the dead receivers were sent, and the attempts the gateway
#   counted by result; the gateway's peak RSS and CPU while draining.
#
# Prints a Markdown report (also written to target/load/webhooks.md). Needs sqlite3
# (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh

N=${N:-20000}
RECEIVERS=${RECEIVERS:-100}
ANSWER_MS=${ANSWER_MS:-10}
SLOW_MS=${SLOW_MS:-10000}
MAX_IN_FLIGHT=${MAX_IN_FLIGHT:-32}
LIMIT_S=${LIMIT_S:-600}           # a run gives up after this long
OUT=target/load
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/mediagate-webhooks.XXXXXX)
KEY=sk-bench
SECRET=bench-task-secret-of-at-least-32-characters-$$
WEBHOOK_SECRET="whsec_$(head -c 32 /dev/urandom | base64)"
PIDS=()

cleanup() {
  stop_started
  wait 2>/dev/null || true
  remove_work
}
trap cleanup EXIT

need_sqlite3
if [[ ${SKIP_BUILD:-} != 1 ]]; then
  log "building (release)"
  cargo build --release --quiet --bin mediagate --example webhook_receivers
fi
BIN=${CARGO_TARGET_DIR:-target}/release
MEDIAGATE=${MEDIAGATE:-$BIN/mediagate}
CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
now_ms() { date +%s%3N; }
per() { awk -v a="$1" -v b="$2" -v f="${3:-1}" -v d="${4:-1}" 'BEGIN { if (b > 0) printf "%.*f", d, a * f / b; else print "-" }'; }
val() { awk -v p="$2" 'index($0, p) == 1 { s += $NF } END { printf "%.0f", s }' "$1"; }

routes() { # $1 = ledger file
  cat <<TOML
[ledger]
url = "sqlite://$1"

[storage]
url = "none"

[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
shutdown_grace_ms = 1000

[tasks]
secret_env = "MEDIAGATE_TASK_SECRET"

[webhooks]
max_in_flight = $MAX_IN_FLIGHT
max_in_flight_per_key = $MAX_IN_FLIGHT
allow_http_hosts = ["127.0.0.1"]
allow_private_networks = ["127.0.0.1"]

[[keys]]
name = "bench"
sha256 = "$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)"
webhook_secret_env = "BENCH_WEBHOOK_SECRET"

$(fast_provider "http://127.0.0.1:9")

$(bench_family bench-video)
TOML
}

start_gateway() { # $1 = name; sets MG_PID and MG_METRICS
  MEDIAGATE_TASK_SECRET=$SECRET BENCH_WEBHOOK_SECRET=$WEBHOOK_SECRET RUST_LOG=${RUST_LOG:-warn,mediagate=info} \
    "$MEDIAGATE" serve --config "$WORK/$1.toml" >/dev/null 2>"$WORK/$1.log" &
  MG_PID=$!
  PIDS+=($MG_PID)
  MG_METRICS=$(wait_for "$WORK/$1.log" "metrics listener on" | sed 's/.*metrics listener on http:\/\/\([0-9.:]*\).*/\1/')
}

ROWS=()
HEALTHY_RATE_FIRST=
for RUN in healthy slow-dead; do
  FLAGS=()
  [[ $RUN == slow-dead ]] && FLAGS=(--slow --slow-ms "$SLOW_MS" --dead)
  "$BIN/examples/webhook_receivers" --count "$RECEIVERS" --answer-ms "$ANSWER_MS" "${FLAGS[@]}" \
    >"$WORK/receivers-$RUN.out" 2>&1 &
  RECV_PID=$!
  PIDS+=($RECV_PID)
  read -r -a PORTS <<<"$(wait_for "$WORK/receivers-$RUN.out" "^receivers" | cut -d' ' -f2-)"
  STATS="http://127.0.0.1:${PORTS[0]}/_stats"

  # The ledger's schema from a first start, then the backlog written into it.
  DB=$WORK/ledger-$RUN.db
  routes "$DB" >"$WORK/$RUN.toml"
  start_gateway "$RUN"
  kill "$MG_PID"; wait "$MG_PID" 2>/dev/null || true
  log "$RUN: writing $N deliveries owed to $RECEIVERS receivers"
  AT=$(now_ms)
  {
    echo "CREATE TEMP TABLE receivers (idx INTEGER PRIMARY KEY, port INTEGER);"
    for i in "${!PORTS[@]}"; do echo "INSERT INTO receivers VALUES ($i, ${PORTS[$i]});"; done
    cat <<SQL
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $N - 1)
INSERT INTO tasks (owner, endpoint, model, kind, fingerprint, video_seconds, state, status,
    provider, upstream_id, task_id, urls, progress, created_ms, updated_ms, finished_ms, callback_url)
SELECT 'bench', 'model-center', 'bench-video', 'video', 'bench-' || n.i, 5, 'completed', 'completed',
    'fast', 'up-' || n.i, 'task_bench_' || n.i, '["https://media.example.com/' || n.i || '.mp4"]', 100,
    $AT, $AT, $AT, 'http://127.0.0.1:' || r.port || '/hook/' || n.i
FROM n JOIN receivers r ON r.idx = n.i % $RECEIVERS;
INSERT INTO deliveries (task_row, url, created_ms, next_attempt_ms)
SELECT id, callback_url, $AT, $AT FROM tasks WHERE callback_url IS NOT NULL;
COMMIT;
SQL
  } | sqlite3 "$DB"

  # Drain.
  log "$RUN: draining"
  T0=$(now_ms)
  start_gateway "$RUN"
  C0=$(cpu_ticks "$MG_PID")
  HEALTHY=0
  for r in $(seq 0 $(( RECEIVERS - 1 ))); do
    if [[ $RUN == slow-dead ]] && (( r < 2 )); then continue; fi
    HEALTHY=$(( HEALTHY + N / RECEIVERS + (r < N % RECEIVERS ? 1 : 0) ))
  done
  PEAK_KB=0
  END=$(( $(date +%s) + LIMIT_S ))
  DONE=no
  while (( $(date +%s) < END )); do
    sleep 1
    rss=$(status_kb "$MG_PID" VmRSS)
    (( rss > PEAK_KB )) && PEAK_KB=$rss
    curl -sf "$STATS" >"$WORK/stats"
    got=$(awk -v skip="$([[ $RUN == slow-dead ]] && echo 2 || echo 0)" '$1 >= skip { s += $2 } END { print s + 0 }' "$WORK/stats")
    if (( got >= HEALTHY )); then DONE=yes; break; fi
  done
  C1=$(cpu_ticks "$MG_PID")
  WALL_MS=$(( $(now_ms) - T0 ))
  curl -sf "http://$MG_METRICS/metrics" >"$WORK/m-$RUN"
  curl -sf "http://127.0.0.1:${PORTS[0]}/_arrivals" >"$WORK/arrivals-$RUN"
  SKIP=$([[ $RUN == slow-dead ]] && echo 2 || echo 0)
  awk -v t0="$T0" -v skip="$SKIP" '$1 >= skip { print $2 - t0 }' "$WORK/arrivals-$RUN" | sort -n >"$WORK/delays-$RUN"
  pct() { awk -v p="$1" '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit } i = int(NR * p / 100); if (i < 1) i = 1; print v[i] }' "$WORK/delays-$RUN"; }
  TOOK_MS=$(tail -1 "$WORK/delays-$RUN")
  TOOK_MS=${TOOK_MS:-0}
  RATE=$(per "$(wc -l <"$WORK/delays-$RUN")" "$TOOK_MS" 1000 0)
  POOL_RATE=$(per "$MAX_IN_FLIGHT" "$ANSWER_MS" 1000 0)
  [[ -z $HEALTHY_RATE_FIRST ]] && HEALTHY_RATE_FIRST=$RATE
  SLOW_DEAD=$(awk '$1 < 2 { printf "%s%s", (NR > 1 ? " / " : ""), $2 }' "$WORK/stats")
  attempts() { val "$WORK/m-$RUN" "mediagate_webhook_attempts_total{result=\"$1\"}"; }
  put_back=$(val "$WORK/m-$RUN" "mediagate_webhook_put_back_total")
  CORES=$(per $(( C1 - C0 )) "$(( WALL_MS * CLK_TCK / 1000 ))" 1 2)
  ROWS+=("| $RUN | $(wc -l <"$WORK/delays-$RUN") of $HEALTHY ($DONE) | $(( TOOK_MS / 1000 )).$(( TOOK_MS % 1000 / 100 )) s | $RATE | $(per "$RATE" "$POOL_RATE" 1 2) | $(per "$RATE" "$HEALTHY_RATE_FIRST" 1 2) | $(pct 50) / $(pct 99) / $TOOK_MS | $SLOW_DEAD | $(attempts success) / $(attempts timeout) / $(attempts unreachable) / $(attempts http_error) | $put_back | $(( PEAK_KB / 1024 )) MiB | $CORES |")
  log "$RUN: ${ROWS[-1]}"
  kill "$MG_PID" "$RECV_PID" 2>/dev/null || true
  wait "$MG_PID" "$RECV_PID" 2>/dev/null || true
done

{
  echo "## Webhooks run of $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Machine: $(nproc) CPUs, $(cpu_model), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r)."
  echo "Versions: mediagate $(git rev-parse --short HEAD 2>/dev/null || echo "?") ($MEDIAGATE), $(rustc --version)."
  echo "Command: \`benches/webhooks.sh\` (N=$N RECEIVERS=$RECEIVERS ANSWER_MS=$ANSWER_MS SLOW_MS=$SLOW_MS MAX_IN_FLIGHT=$MAX_IN_FLIGHT)"
  echo
  echo "Healthy: the receivers that answer after $ANSWER_MS ms (all $RECEIVERS in the first run; all but receiver 0, answering after $SLOW_MS ms, and receiver 1, never answering, in the second). Drain: from the gateway's start to the last post a healthy receiver took. Pool bound: $MAX_IN_FLIGHT posts in flight, each $ANSWER_MS ms at the receiver = $(per "$MAX_IN_FLIGHT" "$ANSWER_MS" 1000 0)/s. Delay: a healthy receiver's post from the gateway's start (every delivery was owed then), ms. Slow / dead: posts they took. Attempts: success / timeout / unreachable / http_error."
  echo
  echo "| run | healthy posts | drain | posts/s | of the pool bound | of the first run's | delay p50 / p99 / max ms | slow / dead | attempts | put back | peak RSS | gateway cores |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/webhooks.md"
