#!/usr/bin/env bash
# Retention (issue #34): what pruning old tasks costs the submits made meanwhile, on
# 127.0.0.1 against the fast upstream (examples/fast_upstream.rs), ledger on SQLite
# and on PostgreSQL (a cluster of its own, when /usr/lib/postgresql is there).
#
#   benches/retention.sh                 # 1,000,000 old rows, 5 rounds, about 20 minutes
#   ROWS=100000 ROUNDS=1 benches/retention.sh   # a quick look
#   ENGINES=sqlite benches/retention.sh  # one engine (sqlite, postgres)
#   MEDIAGATE=path/to/mediagate benches/retention.sh   # another build
#   KEEP_WORK=1 benches/retention.sh     # keep the run's /tmp directory
#
# For each engine:
# 1. A ledger migrated by the gateway gets ROWS finished tasks written straight into
#    it by SQL (as a day's submits leave them: sealed id, answer, URLs, fingerprint;
#    ten keys, submitted 100 to 91 days ago), kept as a template (a file; a template
#    database).
# 2. ROUNDS times, in turns: a copy of the template served with `keep_days = 0`
#    (nothing pruned: the baseline) and another with `keep_days = 90` (the background
#    job prunes at start, in `prune_batch` rows at a time, PRUNE_BATCH when set):
#    after WARMUP seconds of them, submits at RATE a second for SECONDS_EACH (loadgen
#    rate, 50 connections, open loop), latency p50 / p99 / max. The rows pruned during the window are read from
#    `mediagate_ledger_pruned_tasks_total`; the pass must outlast the window.
# 3. On SQLite, a copy pruned to the end with no load (rows per second), then ROWS
#    more old rows written again: the file's size before the prune, after it (with
#    the pages SQLite keeps free for reuse) and after the refill.
#
# Prints a Markdown report (also written to target/load/retention.md). Needs sqlite3
# (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh

ROWS=${ROWS:-1000000}
RATE=${RATE:-1000}
SECONDS_EACH=${SECONDS_EACH:-20}
ROUNDS=${ROUNDS:-5}
WARMUP=${WARMUP:-3}               # seconds of submits before each window
PRUNE_BATCH=${PRUNE_BATCH:-}
ENGINES=${ENGINES:-"sqlite postgres"}
OUT=target/load
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/mediagate-retention.XXXXXX)
KEY=sk-bench
SECRET=bench-task-secret-of-at-least-32-characters-$$
AUTH="Authorization: Bearer $KEY"
TASKS=/v2/model-center/tasks
BODY='{"model":"bench-video","prompt":"a red fox running through fresh snow at dawn, cinematic","duration":5}'
PRUNED='mediagate_ledger_pruned_tasks_total'
PIDS=()

cleanup() {
  stop_started
  wait 2>/dev/null || true
  remove_work
}
trap cleanup EXIT
PG_STOP=()
stop_postgres() { if (( ${#PG_STOP[@]} )); then "${PG_STOP[@]}" >/dev/null 2>&1 || true; rm -rf "$PG_DIR"; fi; }
trap 'cleanup; stop_postgres' EXIT

need_sqlite3
log "building (release)"
cargo build --release --quiet --bin mediagate --example fast_upstream --example loadgen
BIN=${CARGO_TARGET_DIR:-target}/release
LOADGEN=$BIN/examples/loadgen
MEDIAGATE=${MEDIAGATE:-$BIN/mediagate}

$BIN/examples/fast_upstream --listen 127.0.0.1:0 >"$WORK/upstream.out" 2>&1 &
PIDS+=($!)
UP_ADDR=$(wait_for "$WORK/upstream.out" "listening on" | awk '{print $3}')

key_sha=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
routes() { # $1 = ledger URL, $2 = keep_days
  cat <<EOF
[ledger]
url = "$1"
keep_days = $2
${PRUNE_BATCH:+prune_batch = $PRUNE_BATCH}

[storage]
url = "none"

[tracker]
enabled = false

[server]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
shutdown_grace_ms = 1000
max_connections_per_ip = 0

[tasks]
secret_env = "MEDIAGATE_TASK_SECRET"

$(unlimited)

[[keys]]
name = "bench"
sha256 = "$key_sha"

$(fast_provider "http://$UP_ADDR")

$(bench_family bench-video)
EOF
}

# ROWS finished tasks into the SQLite ledger $1, submitted 100 to 91 days ago.
old_rows_sqlite() {
  local start=$(( $(date +%s%3N) - 100 * 86400000 ))
  sqlite3 "$1" ".param set :n $ROWS" ".param set :start $start" "
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :n),
    t AS (SELECT i, :start + i * (777600000 / :n) AS c, 'task_' || lower(hex(randomblob(30))) AS tid FROM n)
    INSERT INTO tasks (owner, endpoint, model, kind, fingerprint, video_seconds, state, status,
        provider, upstream_id, task_id, answer_status, answer_body, urls, created_ms, updated_ms,
        finished_ms, next_poll_ms, poll_interval_ms, progress, cost_estimate, cost_settled)
    SELECT 'bench-' || (i % 10), 'model-center', 'bench-video', 'video', lower(hex(randomblob(32))),
        5, 'completed', 'completed', 'fast', 'old-' || i, tid, 200,
        '{\"id\":\"' || tid || '\",\"status\":\"queued\",\"model\":\"bench-video\",\"created_at\":' || (c / 1000) || '}',
        '[\"https://cdn.example/v/' || i || '.mp4\"]', c, c + 60000, c + 60000, c + 5000, 5000, 100,
        1000000, 1000000
    FROM t;
    PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
}

# The same rows into the PostgreSQL database $1.
old_rows_postgres() {
  local start=$(( $(date +%s%3N) - 100 * 86400000 ))
  psql -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d "$1" -v ON_ERROR_STOP=1 -v n="$ROWS" -v start="$start" >/dev/null <<'SQL'
INSERT INTO tasks (owner, endpoint, model, kind, fingerprint, video_seconds, state, status,
    provider, upstream_id, task_id, answer_status, answer_body, urls, created_ms, updated_ms,
    finished_ms, next_poll_ms, poll_interval_ms, progress, cost_estimate, cost_settled)
SELECT 'bench-' || (i % 10), 'model-center', 'bench-video', 'video',
    md5(random()::text) || md5(random()::text), 5, 'completed', 'completed', 'fast',
    'old-' || i, tid, 200,
    '{"id":"' || tid || '","status":"queued","model":"bench-video","created_at":' || (c / 1000) || '}',
    '["https://cdn.example/v/' || i || '.mp4"]', c, c + 60000, c + 60000, c + 5000, 5000, 100,
    1000000, 1000000
FROM (SELECT i, :start::bigint + i * (777600000 / :n) AS c,
    'task_' || md5(random()::text) || substr(md5(random()::text), 1, 28) AS tid
    FROM generate_series(1, :n) AS i) AS t;
VACUUM ANALYZE;
SQL
}

pg() { PGOPTIONS='-c client_min_messages=warning' psql -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "$1" >/dev/null; }

# The template of ENGINE: migrated by the gateway, then the old rows.
make_template() {
  if [[ $ENGINE == sqlite ]]; then
    TEMPLATE=$WORK/template.db
    TEMPLATE_URL="sqlite://$TEMPLATE"
  else
    pg "CREATE DATABASE template_ledger"
    TEMPLATE_URL="postgres://postgres@127.0.0.1:$PG_PORT/template_ledger"
  fi
  routes "$TEMPLATE_URL" 0 >"$WORK/template-$ENGINE.toml"
  MEDIAGATE_TASK_SECRET=$SECRET "$MEDIAGATE" usage --config "$WORK/template-$ENGINE.toml" >/dev/null
  log "$ENGINE: writing $ROWS old rows"
  if [[ $ENGINE == sqlite ]]; then
    old_rows_sqlite "$TEMPLATE"
    TEMPLATE_SIZE="$(mib "$(stat -c %s "$TEMPLATE")") MiB"
  else
    old_rows_postgres template_ledger
    TEMPLATE_SIZE=$(psql -At -h 127.0.0.1 -p "$PG_PORT" -U postgres -d template_ledger \
      -c "SELECT pg_size_pretty(pg_database_size('template_ledger'))")
  fi
}

# A fresh copy of the template named $1; sets URL (and DB, on SQLite).
fresh_copy() {
  if [[ $ENGINE == sqlite ]]; then
    DB=$WORK/$1.db
    rm -f "$DB" "$DB-wal" "$DB-shm"
    cp "$TEMPLATE" "$DB"
    URL="sqlite://$DB"
  else
    pg "DROP DATABASE IF EXISTS $1"
    pg "CREATE DATABASE $1 TEMPLATE template_ledger"
    URL="postgres://postgres@127.0.0.1:$PG_PORT/$1"
  fi
}

start_gateway() { # $1 = name, $2 = ledger URL, $3 = keep_days; sets ADDR, METRICS, GW_PID
  routes "$2" "$3" >"$WORK/$1.toml"
  MEDIAGATE_TASK_SECRET=$SECRET RUST_LOG=${RUST_LOG:-info} \
    "$MEDIAGATE" serve --config "$WORK/$1.toml" >/dev/null 2>"$WORK/$1.log" &
  GW_PID=$!
  PIDS+=($GW_PID)
  ADDR=$(wait_for "$WORK/$1.log" "listening on http://" | sed 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/')
  METRICS=$(wait_for "$WORK/$1.log" "metrics listener on" | sed 's/.*metrics listener on http:\/\/\([0-9.:]*\).*/\1/')
}
stop_gateway() { kill "$GW_PID"; wait "$GW_PID" 2>/dev/null || true; }
pruned() { curl -sf "http://$METRICS/metrics" | awk -v p="$PRUNED" '$1 == p { print $2 }'; }
field() { echo "$1" | sed "s/.*$2=\([0-9.]*\).*/\1/"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "$BODY" >"$WORK/body.json"

REPORT=()
for ENGINE in $ENGINES; do
  if [[ $ENGINE == postgres ]] && ! start_postgres; then
    REPORT+=("" "PostgreSQL: not measured (no cluster could be started).")
    continue
  fi
  make_template
  declare -A P50=() P99=()
  RESULTS=()
  IN_WINDOW=()
  for round in $(seq 1 "$ROUNDS"); do
    for mode in off on; do
      fresh_copy "ledger_$mode"
      keep=0; [[ $mode == on ]] && keep=90
      # The copy's pages on disk before the gateway starts, and a few seconds of
      # submits before the window: its write-back and the first commits out of it.
      sync
      start_gateway "$ENGINE-$mode-$round" "$URL" "$keep"
      $LOADGEN rate --addr "$ADDR" --rate "$RATE" --seconds "$WARMUP" --conns 50 \
        --path "$TASKS" --header "$AUTH" --method POST --body-file "$WORK/body.json" \
        --header "Content-Type: application/json" >/dev/null
      p0=$(pruned)
      out=$($LOADGEN rate --addr "$ADDR" --rate "$RATE" --seconds "$SECONDS_EACH" --conns 50 \
        --path "$TASKS" --header "$AUTH" --method POST --body-file "$WORK/body.json" \
        --header "Content-Type: application/json")
      p1=$(pruned)
      stop_gateway
      echo "$ENGINE $mode $round: $out pruned $p0 → $p1" >>"$WORK/loadgen.log"
      [[ $(field "$out" failed) == 0 ]] || { echo "submits failed: $out" >&2; exit 1; }
      RESULTS+=("| $round | $([[ $mode == on ]] && echo "pruning" || echo "off") | $(field "$out" rps) | $(field "$out" p50_us) | $(field "$out" p99_us) | $(field "$out" max_us) | $(( ${p1%.*} - ${p0%.*} )) | ${p1%.*} |")
      log "$ENGINE: ${RESULTS[-1]}"
      P50[$mode]+="$(field "$out" p50_us) "
      P99[$mode]+="$(field "$out" p99_us) "
      [[ $mode == on ]] && IN_WINDOW+=($(( ${p1%.*} - ${p0%.*} )))
      if [[ $mode == on ]] && (( ${p1%.*} >= ROWS )); then
        log "the pass ended within the window: round $round does not measure a prune throughout"
      fi
    done
  done

  # 3. On SQLite, pruned to the end without load, then refilled. (On PostgreSQL the
  # rate is the window's: a prune to the end takes long there, see the report.)
  SPACE=""
  if [[ $ENGINE == sqlite ]]; then
    log "$ENGINE: pruning $ROWS rows without load"
    fresh_copy ledger_space
    BEFORE_BYTES=$(stat -c %s "$DB")
    t0=$(date +%s%3N)
    start_gateway "$ENGINE-space" "$URL" 90
    end=$(( $(date +%s) + 1800 ))
    until (( $(pruned | cut -d. -f1) >= ROWS )); do
      (( $(date +%s) < end )) || { echo "the prune did not end in 30 minutes" >&2; exit 1; }
      sleep 0.5
    done
    t1=$(date +%s%3N)
    stop_gateway
    sqlite3 "$DB" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
    PRUNED_BYTES=$(stat -c %s "$DB")
    FREE_PAGES=$(sqlite3 "$DB" "PRAGMA freelist_count;")
    PAGE=$(sqlite3 "$DB" "PRAGMA page_size;")
    log "$ENGINE: refilling $ROWS rows"
    old_rows_sqlite "$DB"
    REFILLED_BYTES=$(stat -c %s "$DB")
    SPACE="Without load: $ROWS rows pruned in $(awk -v ms=$(( t1 - t0 )) 'BEGIN { printf "%.1f", ms / 1000 }') s ($(awk -v n="$ROWS" -v ms=$(( t1 - t0 )) 'BEGIN { printf "%.0f", n * 1000 / ms }') rows/s, gateway start included). Ledger file: $(mib "$BEFORE_BYTES") MiB before, $(mib "$PRUNED_BYTES") MiB after the prune ($(mib $(( FREE_PAGES * PAGE ))) MiB of it free pages), $(mib "$REFILLED_BYTES") MiB after $ROWS rows written again."
  fi
  off99=$(echo "${P99[off]}" | median); on99=$(echo "${P99[on]}" | median)
  REPORT+=(""
    "### $ENGINE"
    ""
    "Submits at $RATE/s for $SECONDS_EACH s on a copy of a ledger holding $ROWS old finished tasks ($TEMPLATE_SIZE): \`keep_days = 0\` (off) and \`keep_days = 90\` (pruning from start). Latency µs, loadgen's (open loop). Pruned: rows during the window; total: by its end."
    ""
    "| round | ledger | submits/s | p50 µs | p99 µs | max µs | pruned in window | pruned total |"
    "|---|---|---|---|---|---|---|---|"
    "${RESULTS[@]}"
    ""
    "Median p50: off $(echo "${P50[off]}" | median) µs, pruning $(echo "${P50[on]}" | median) µs. Median p99: off $off99 µs, pruning $on99 µs: **$(( on99 - off99 )) µs** (target: within +500 µs)."
    ""
    "Pruned while submits ran: $(echo "${IN_WINDOW[*]}" | median) rows per window (median), $(( $(echo "${IN_WINDOW[*]}" | median) / SECONDS_EACH )) rows/s."
    ""
    "$SPACE")
done

{
  echo "## Retention run of $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Machine: $(nproc) CPUs, $(cpu_model), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Versions: mediagate $(git rev-parse --short HEAD 2>/dev/null || echo "?") ($MEDIAGATE), $(rustc --version)."
  echo "Command: \`benches/retention.sh\` (ENGINES=\"$ENGINES\" ROWS=$ROWS RATE=$RATE SECONDS_EACH=$SECONDS_EACH WARMUP=$WARMUP ROUNDS=$ROUNDS${PRUNE_BATCH:+ PRUNE_BATCH=$PRUNE_BATCH})"
  printf '%s\n' "${REPORT[@]}"
} | tee "$OUT/retention.md"
