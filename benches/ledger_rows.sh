#!/usr/bin/env bash
# The ledger at 1 M and 10 M rows (issue #34), on SQLite and on PostgreSQL: what a
# key's reads cost through the gateway, the operator's command, start-up, and the
# bytes a task takes.
#
#   benches/ledger_rows.sh                          # 1 M and 10 M rows, both engines
#   ROWS=1000000 ENGINES=sqlite benches/ledger_rows.sh
#   MEDIAGATE=path/to/mediagate benches/ledger_rows.sh   # another build
#   COMPARE=path/to/older/mediagate benches/ledger_rows.sh   # that build measured first
#                                                   # on the same rows, then this one
#   KEEP_WORK=1 benches/ledger_rows.sh              # keep the run's /tmp directory (and
#                                                   # in it the last SQLite ledger)
#   NO_BUILD=1 benches/ledger_rows.sh               # the binaries already built
#
# For each engine and size: a fresh ledger, migrated by the gateway (started once and
# stopped); ROWS rows of history written into it by examples/ledger_rows.rs (the
# ledger's own schema, spread over OWNERS keys, DAYS days, six models, three
# endpoints and every state, some unknown_outcome, idempotency keys on recent rows;
# see its header). Then, the gateway serving from the full ledger:
#
# 1. Start-up: from launch to /readyz answering, STARTS times (the migrations'
#    check runs before it listens); the sweep's two statements (what the first sweep
#    runs right after) timed on the ledger by the engine's own shell.
# 2. Through the gateway over HTTP, RATE requests a second for MEASURE seconds each
#    (loadgen rate, 4 connections), key KEY (one of the OWNERS, an average one):
#    the listing's first page (GET /v2/model-center/tasks), a page deep in its history
#    (`after` = a task near its oldest), its usage for last month (GET /v2/usage; its
#    first read is also timed alone, before the others), and
#    an idempotent replay (a submit whose Idempotency-Key exists): p50 and p99.
# 3. `mediagate tasks --state unknown_outcome` and `mediagate tasks show ID` (a task
#    deep in the key's history, by its sealed id): their wall times, CLI_RUNS runs.
# 4. Bytes per task: the SQLite file over the rows; PostgreSQL's
#    pg_total_relation_size('tasks') over the rows.
#
# The query plans of the statements behind each operation are written beside the
# report (target/load/ledger-rows-plans-ENGINE-ROWS.txt). Prints a Markdown report
# (also target/load/ledger-rows.md). Needs sqlite3 (installed with apt-get when
# missing) and, for the PostgreSQL rows, /usr/lib/postgresql (a private cluster is
# started here, as the `postgres` user when run as root). 10 M rows take about 8 GB
# of disk per engine, one engine at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh

ROWS=${ROWS:-"1000000 10000000"}
ENGINES=${ENGINES:-"sqlite postgres"}
OWNERS=${OWNERS:-1000}
DAYS=${DAYS:-180}
RATE=${RATE:-100}          # requests a second of each operation
MEASURE=${MEASURE:-10}     # seconds of each operation
STARTS=${STARTS:-3}
CLI_RUNS=${CLI_RUNS:-5}
KEY_NAME=${KEY:-key-0001}
OUT=target/load
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/mediagate-ledger-rows.XXXXXX)
SECRET=bench-task-secret-of-at-least-32-characters-$$
KEY=sk-bench
AUTH="Authorization: Bearer $KEY"
TASKS=/v2/model-center/tasks
BODY='{"model":"bench-video","prompt":"a red fox running through fresh snow at dawn, cinematic","duration":5}'
PIDS=()
PG_STOP=()

cleanup() {
  stop_started
  wait 2>/dev/null || true
  if ((${#PG_STOP[@]})); then "${PG_STOP[@]}" >/dev/null 2>&1 || true; rm -rf "$PG_DIR"; fi
  remove_work
}
trap cleanup EXIT

need_sqlite3
if [[ ${NO_BUILD:-} != 1 ]]; then
  log "building (release)"
  cargo build --release --quiet --bin mediagate --example fast_upstream --example loadgen --example ledger_rows
fi
BIN=${CARGO_TARGET_DIR:-target}/release
LOADGEN=$BIN/examples/loadgen
GENERATE=$BIN/examples/ledger_rows
THIS=${MEDIAGATE:-$BIN/mediagate}
COMPARE=${COMPARE:-}

$BIN/examples/fast_upstream --listen 127.0.0.1:0 >"$WORK/upstream.out" 2>&1 &
PIDS+=($!)
UP_ADDR=$(wait_for "$WORK/upstream.out" "listening on" | awk '{print $3}')

psql_on() { # $1 = database, then psql's arguments
  local db=$1; shift
  "${as_pg[@]}" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U postgres -d "$db" "$@"
}

# --- the gateway ----------------------------------------------------------------------
key_sha=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
routes() { # $1 = ledger url, $2 = port
  cat <<EOF
[ledger]
url = "$1"

[storage]
url = "none"

# The rows' unfinished tasks are not the fast upstream's: not followed.
[tracker]
enabled = false

[server]
listen = "127.0.0.1:$2"
metrics_listen = "127.0.0.1:0"
shutdown_grace_ms = 1000
max_connections_per_ip = 0

[tasks]
secret_env = "MEDIAGATE_TASK_SECRET"

$(unlimited)

# One of the rows' owners, with a budget: its usage reads the spend as well.
[[keys]]
name = "$KEY_NAME"
sha256 = "$key_sha"
budget = { per_day = 100000.00, per_month = 1000000.00 }

$(fast_provider "http://$UP_ADDR")

$(bench_family bench-video bench-video-hd bench-video-lite bench-clip)

[families.pictures]
kind = "image"
providers = ["fast"]
models = ["bench-image", "bench-image-hd"]
schema = "video"
EOF
}

now_ms() { date +%s%3N; }
# Launch the gateway on ledger $1; sets MG_PID, MG_ADDR and STARTED_MS (the
# milliseconds until /readyz answered).
start_gateway() {
  local port t0 t1
  port=$(free_port)
  routes "$1" "$port" >"$WORK/gateway.toml"
  t0=$(now_ms)
  MEDIAGATE_TASK_SECRET=$SECRET RUST_LOG=${RUST_LOG:-info} \
    "$MEDIAGATE" serve --config "$WORK/gateway.toml" >/dev/null 2>>"$WORK/gateway.log" &
  MG_PID=$!
  PIDS+=($MG_PID)
  MG_ADDR=127.0.0.1:$port
  for _ in $(seq 1 3000); do
    if curl -sf -o /dev/null "http://$MG_ADDR/readyz"; then break; fi
    kill -0 "$MG_PID" 2>/dev/null || { echo "the gateway exited" >&2; tail "$WORK/gateway.log" >&2; exit 1; }
    sleep 0.01
  done
  t1=$(now_ms)
  STARTED_MS=$(( t1 - t0 ))
}
stop_gateway() { kill "$MG_PID"; wait "$MG_PID" 2>/dev/null || true; }

# A loadgen rate run of $RATE/s for $MEASURE s from 4 connections; prints "p50 p99"
# in ms, and how many requests failed (timed out) when any did.
measure() { # $1 = what, then loadgen's arguments
  local what=$1 out
  shift
  out=$($LOADGEN rate --addr "$MG_ADDR" --rate "$RATE" --seconds "$MEASURE" --conns 4 --header "$AUTH" "$@")
  echo "$ENGINE $N $what: $out" >>"$WORK/loadgen.log"
  echo "$out" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "%.2f %.2f", v["p50_us"] / 1000, v["p99_us"] / 1000
    if (v["failed"] > 0) printf " (%d of %d failed)", v["failed"], v["requests"] }'
}
median() { tr ' ' '\n' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
largest() { tr ' ' '\n' | sort -n | tail -1; }

# Last month, as UTC dates: the whole of it is in the rows' history.
LAST_MONTH_FROM=$(date -u -d "$(date -u +%Y-%m-01) -1 month" +%Y-%m-%d)
LAST_MONTH_TO=$(date -u -d "$(date -u +%Y-%m-01) -1 day" +%Y-%m-%d)
echo "$BODY" >"$WORK/body.json"

# Measure the gateway $MEDIAGATE ($BUILD) on the full ledger: steps 1 to 4.
measure_build() {
      # 1. Start-up on the full ledger.
      # The first start migrates what this build adds; the median is of the others.
      STARTS_MS=()
      for i in $(seq 0 "$STARTS"); do
        start_gateway "$URL"
        STARTS_MS+=("$STARTED_MS")
        (( i == STARTS )) || stop_gateway
      done
      START_MED=$(echo "${STARTS_MS[@]:1}" | median)
      # The sweep's statements as the first sweep runs them (keys forgotten after 24 h,
      # rows submitting for a minute), undone.
      NOW=$(now_ms)
      SWEEP_SQL="UPDATE tasks SET state = 'unknown_outcome', updated_ms = $NOW WHERE state = 'submitting' AND updated_ms < $(( NOW - 60000 )); UPDATE tasks SET idempotency_key = NULL WHERE idempotency_key IS NOT NULL AND created_ms < $(( NOW - 86400000 ));"
      t0=$(now_ms)
      case $ENGINE in
        sqlite) sqlite3 "$DB" "BEGIN; $SWEEP_SQL ROLLBACK;" ;;
        postgres) psql_on "$DBNAME" -c "BEGIN; $SWEEP_SQL ROLLBACK;" >/dev/null ;;
      esac
      SWEEP_MS=$(( $(now_ms) - t0 ))

      # 2. The reads of key KEY_NAME, through the gateway.
      # A task a twentieth of the way from the key's oldest (and a page or more from it).
      LISTED="owner = '$KEY_NAME' AND endpoint = 'model-center' AND task_id IS NOT NULL AND deleted_ms IS NULL"
      DEEP=$(sql "SELECT task_id FROM tasks WHERE $LISTED ORDER BY id LIMIT 1 OFFSET (SELECT CASE WHEN COUNT(*) / 20 > 21 THEN COUNT(*) / 20 ELSE 21 END FROM tasks WHERE $LISTED)")
      KEY_ROWS=$(sql "SELECT COUNT(*) FROM tasks WHERE owner = '$KEY_NAME'")
      read -r FIRST_P50 FIRST_P99 <<<"$(measure "first page" --path "$TASKS")"
      curl -sf "http://$MG_ADDR$TASKS?after=$DEEP" -H "$AUTH" | grep -q '"has_more":true' \
        || { echo "the deep page does not read as one" >&2; exit 1; }
      read -r DEEP_P50 DEEP_P99 <<<"$(measure "deep page" --path "$TASKS?after=$DEEP")"
      # The month's first read alone (on SQLite it asks for the days' sums, made in
      # the background; the reads measured next find them made or being made).
      USAGE_PATH="/v2/usage?from=$LAST_MONTH_FROM&to=$LAST_MONTH_TO"
      USAGE_FIRST=$(curl -sf -o /dev/null -w '%{time_total}' "http://$MG_ADDR$USAGE_PATH" -H "$AUTH" \
        | awk '{ printf "%.2f", $1 * 1000 }')
      read -r USAGE_P50 USAGE_P99 <<<"$(measure "usage" --path "$USAGE_PATH")"
      IDEM="replay-$ENGINE-$N-$BUILD-$$"
      FIRST=$(curl -sf -X POST "http://$MG_ADDR$TASKS" -H "$AUTH" -H 'Content-Type: application/json' \
        -H "Idempotency-Key: $IDEM" --data-binary @"$WORK/body.json")
      read -r REPLAY_P50 REPLAY_P99 <<<"$(measure "replay" --method POST --body-file "$WORK/body.json" \
        --header 'Content-Type: application/json' --header "Idempotency-Key: $IDEM" --path "$TASKS")"
      [[ $(curl -sf -X POST "http://$MG_ADDR$TASKS" -H "$AUTH" -H 'Content-Type: application/json' \
        -H "Idempotency-Key: $IDEM" --data-binary @"$WORK/body.json") == "$FIRST" ]] \
        || { echo "the replay is not the first answer" >&2; exit 1; }
      stop_gateway

      # 3. The operator's command.
      CLI_MS=()
      for _ in $(seq 1 "$CLI_RUNS"); do
        t0=$(now_ms)
        MEDIAGATE_TASK_SECRET=$SECRET "$MEDIAGATE" --config "$WORK/gateway.toml" tasks --state unknown_outcome >"$WORK/unknown.txt"
        CLI_MS+=($(( $(now_ms) - t0 )))
      done
      CLI_MED=$(echo "${CLI_MS[@]}" | median)
      CLI_MAX=$(echo "${CLI_MS[@]}" | largest)
      UNKNOWN=$(sql "SELECT COUNT(*) FROM tasks WHERE state = 'unknown_outcome'")
      # `mediagate tasks show ID` of a task deep in the key's history, by its sealed id.
      SHOW_MS=()
      for _ in $(seq 1 "$CLI_RUNS"); do
        t0=$(now_ms)
        MEDIAGATE_TASK_SECRET=$SECRET "$MEDIAGATE" --config "$WORK/gateway.toml" tasks show "$DEEP" >"$WORK/show.txt"
        SHOW_MS+=($(( $(now_ms) - t0 )))
      done
      grep -q "task_id: $DEEP" "$WORK/show.txt" \
        || { echo "tasks show did not find the task" >&2; exit 1; }
      SHOW_MED=$(echo "${SHOW_MS[@]}" | median)
      SHOW_MAX=$(echo "${SHOW_MS[@]}" | largest)

      # The plans of the statements behind each operation, with their parameters
      # bound as the gateway binds them (SQLite plans a statement before it sees them).
      PLANS=$OUT/ledger-rows-plans-$ENGINE-$N-$BUILD.txt
      DEEP_ROW=$(sql "SELECT id FROM tasks WHERE task_id = '$DEEP'")
      MONTH_MS=$(( $(date -u -d "$LAST_MONTH_FROM" +%s) * 1000 ))
      MONTH_END_MS=$(( $(date -u -d "$LAST_MONTH_TO" +%s) * 1000 + 86400000 ))
      plan() { # $1 = what, $2 = statement ($1, $2, … as in src/tasks/ledger/record.rs), then its values
        local what=$1 statement=$2 i=1 binds=() values=()
        shift 2
        for v in "$@"; do binds+=(".parameter set \$$i $v"); values+=("$v"); i=$(( i + 1 )); done
        echo "== $what"
        case $ENGINE in
          sqlite) printf '%s\n' "${binds[@]}" "EXPLAIN QUERY PLAN $statement;" | sqlite3 "$DB" ;;
          postgres)
            local typed=$statement
            # Literal values (PostgreSQL plans each of the first executions for its own).
            for ((j = ${#values[@]}; j >= 1; j--)); do typed=${typed//\$$j/${values[j-1]}}; done
            psql_on "$DBNAME" -c "BEGIN; EXPLAIN (ANALYZE, BUFFERS) $typed; ROLLBACK;" ;;
        esac
      }
      COLS="id, owner, endpoint, state, task_id, created_ms"
      {
        plan "listing, first page" "SELECT $COLS FROM tasks WHERE owner = \$1 AND endpoint = \$2 AND id < \$3 AND task_id IS NOT NULL AND deleted_ms IS NULL ORDER BY id DESC LIMIT \$4" "'$KEY_NAME'" "'model-center'" 9223372036854775807 21
        plan "listing, deep page" "SELECT $COLS FROM tasks WHERE owner = \$1 AND endpoint = \$2 AND id < \$3 AND task_id IS NOT NULL AND deleted_ms IS NULL ORDER BY id DESC LIMIT \$4" "'$KEY_NAME'" "'model-center'" "$DEEP_ROW" 21
        plan "usage, a month" "SELECT owner, model, created_ms / 86400000 AS day, COUNT(*), SUM(cost_settled) FROM tasks WHERE (\$1 IS NULL OR owner = \$1) AND created_ms >= \$2 AND created_ms < \$3 GROUP BY owner, model, created_ms / 86400000" "'$KEY_NAME'" "$MONTH_MS" "$MONTH_END_MS"
        plan "usage, a month, of one key (USAGE_OF)" "SELECT owner, model, created_ms / 86400000 AS day, COUNT(*), SUM(cost_settled) FROM tasks WHERE owner = \$1 AND created_ms >= \$2 AND created_ms < \$3 GROUP BY owner, model, created_ms / 86400000" "'$KEY_NAME'" "$MONTH_MS" "$MONTH_END_MS"
        plan "tasks --state unknown_outcome (SELECT_IN_STATE)" "SELECT $COLS FROM tasks WHERE state = \$1 AND (\$2 IS NULL OR owner = \$2) ORDER BY id DESC LIMIT \$3" "'unknown_outcome'" NULL 100
        plan "tasks --state unknown_outcome" "SELECT $COLS FROM tasks WHERE (\$1 IS NULL OR state = \$1) AND (\$2 IS NULL OR owner = \$2) ORDER BY id DESC LIMIT \$3" "'unknown_outcome'" NULL 100
        plan "sweep, forget keys" "UPDATE tasks SET idempotency_key = NULL WHERE idempotency_key IS NOT NULL AND created_ms < \$1" $(( NOW - 86400000 ))
      } >"$PLANS" 2>&1

      case $ENGINE in
        sqlite) BYTES=$(( $(stat -c %s "$DB") + $(stat -c %s "$DB-wal" 2>/dev/null || echo 0) )) ;;
        postgres) BYTES=$(sql "SELECT pg_total_relation_size('tasks')") ;;
      esac
      ROW="| $ENGINE | $COUNT | $BUILD | $(( BYTES / COUNT )) | $KEY_ROWS | $FIRST_P50 / $FIRST_P99 | $DEEP_P50 / $DEEP_P99 | $USAGE_P50 / $USAGE_P99 (first $USAGE_FIRST) | $REPLAY_P50 / $REPLAY_P99 | $CLI_MED / $CLI_MAX ($UNKNOWN) | $SHOW_MED / $SHOW_MAX | ${STARTS_MS[0]} / $START_MED ($EMPTY_START) | $SWEEP_MS | $GEN_S |"
      REPORT+=("$ROW")
      log "$ROW"
}

REPORT=()
# Every engine at a size before the next size: the smaller sizes first.
for N in $ROWS; do
  for ENGINE in $ENGINES; do
    if [[ $ENGINE == postgres ]] && ((${#PG_STOP[@]} == 0)); then
      if ! start_postgres; then log "PostgreSQL rows left out"; ENGINES=${ENGINES/postgres/}; continue; fi
    fi
    log "$ENGINE, $N rows: a fresh ledger, migrated by the gateway"
    case $ENGINE in
      sqlite)
        DB=$WORK/ledger-$N.db
        URL="sqlite://$DB"
        sql() { sqlite3 -readonly "$DB" "$@"; }
        ;;
      postgres)
        DBNAME=ledger_$N
        psql_on postgres -c "CREATE DATABASE $DBNAME"
        URL="postgres://postgres@127.0.0.1:$PG_PORT/$DBNAME"
        sql() { psql_on "$DBNAME" -At -F '|' -c "$1"; }
        ;;
    esac
    # Migrated by the older build when two are compared: the newer one adds its own.
    MEDIAGATE=${COMPARE:-$THIS}
    start_gateway "$URL"
    EMPTY_START=$STARTED_MS
    stop_gateway

    log "$ENGINE, $N rows: writing the rows"
    g0=$(now_ms)
    case $ENGINE in
      sqlite)
        MEDIAGATE_TASK_SECRET=$SECRET $GENERATE --rows "$N" --owners "$OWNERS" --days "$DAYS" --sqlite "$DB"
        ;;
      postgres)
        # Indexes made after the rows (as a restore does) and triggers off for the
        # load: spend filled as they would have.
        INDEXES=$(sql "SELECT indexdef || ';' FROM pg_indexes WHERE tablename = 'tasks' AND indexname <> 'tasks_pkey'")
        DROPS=$(sql "SELECT 'DROP INDEX ' || indexname || ';' FROM pg_indexes WHERE tablename = 'tasks' AND indexname <> 'tasks_pkey'")
        {
          echo "SET maintenance_work_mem = '512MB'; BEGIN; ALTER TABLE tasks DISABLE TRIGGER USER; $DROPS"
          echo "COPY tasks ($($GENERATE --columns --secret -)) FROM STDIN;"
          MEDIAGATE_TASK_SECRET=$SECRET $GENERATE --rows "$N" --owners "$OWNERS" --days "$DAYS"
          echo '\.'
          echo "$INDEXES ALTER TABLE tasks ENABLE TRIGGER USER;"
          echo "INSERT INTO spend (owner, day, micros) SELECT owner, created_ms / 86400000, SUM(COALESCE(cost_settled, cost_estimate)) FROM tasks WHERE cost_estimate IS NOT NULL GROUP BY owner, created_ms / 86400000;"
          echo "SELECT setval('tasks_id_seq', (SELECT MAX(id) FROM tasks)); COMMIT; VACUUM ANALYZE tasks; VACUUM ANALYZE spend;"
        } | psql_on "$DBNAME" >/dev/null
        ;;
    esac
    GEN_S=$(awk -v ms=$(( $(now_ms) - g0 )) 'BEGIN { printf "%.0f", ms / 1000 }')
    COUNT=$(sql "SELECT COUNT(*) FROM tasks")
    case $ENGINE in
      sqlite) BYTES=$(( $(stat -c %s "$DB") + $(stat -c %s "$DB-wal" 2>/dev/null || echo 0) )) ;;
      postgres) BYTES=$(sql "SELECT pg_total_relation_size('tasks')") ;;
    esac
    log "$ENGINE, $N rows: $COUNT rows in $GEN_S s, $(( BYTES / COUNT )) bytes per task"

    for BUILD in ${COMPARE:+before} this; do
      if [[ $BUILD == before ]]; then MEDIAGATE=$COMPARE; else MEDIAGATE=$THIS; fi
      measure_build
    done

    # The next size needs the disk (a SQLite ledger is kept with KEEP_WORK=1).
    case $ENGINE in
      sqlite) [[ ${KEEP_WORK:-} == 1 ]] || rm -f "$DB" "$DB-wal" "$DB-shm" ;;
      postgres) psql_on postgres -c "DROP DATABASE $DBNAME" ;;
    esac
  done
done

{
  echo "## Ledger rows run of $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Machine: $(nproc) CPUs, $(cpu_model), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r)."
  echo "Versions: mediagate $(git rev-parse --short HEAD 2>/dev/null || echo "?") ($THIS${COMPARE:+; before: $COMPARE}), $(rustc --version)${PG_BIN:+, PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')}."
  echo "Command: \`benches/ledger_rows.sh\` (${COMPARE:+COMPARE=… }ROWS=\"$ROWS\" ENGINES=\"$ENGINES\" OWNERS=$OWNERS DAYS=$DAYS RATE=$RATE MEASURE=$MEASURE KEY=$KEY_NAME)"
  echo
  echo "Times in ms, p50 / p99 over $(( RATE * MEASURE )) requests at $RATE a second (4 connections) through the gateway, for key $KEY_NAME (its rows: \"key rows\"). Usage: $LAST_MONTH_FROM to $LAST_MONTH_TO; its first read alone (curl, in brackets) comes before the others. CLI: \`mediagate tasks --state unknown_outcome\`, median / largest of $CLI_RUNS runs (the unknown_outcome rows in brackets); CLI show: \`mediagate tasks show\` of the deep page's task by its sealed id, the same. Start-up: launch to /readyz answering, the first (which migrates what the build adds) / the median of $STARTS more (on the empty ledger in brackets). Sweep: its two statements run once on the full ledger (then undone). Bytes per task: the SQLite file, or pg_total_relation_size('tasks'), over the rows."
  echo
  echo "| engine | rows | build | bytes per task | key rows | first page | deep page | usage, a month | idempotent replay | CLI unknown_outcome | CLI show | start-up: first / median | sweep | rows written in s |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${REPORT[@]}"
} | tee "$OUT/ledger-rows.md"
