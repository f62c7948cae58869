#!/usr/bin/env bash
# Load benchmark: the same load through mediagate, through nginx (plain proxy_pass with
# upstream keep-alive) and straight at a fast upstream, all on 127.0.0.1.
#
#   benches/load.sh                 # everything, ~6 minutes
#   DURATION=5 benches/load.sh      # shorter runs
#   ONLY=ledger benches/load.sh     # only the ledger's cost (no nginx), ~1 minute
#   MEDIAGATE=path/to/mediagate ONLY=ledger benches/load.sh   # another build, to compare
#   LEDGER_DIR=/dev/shm ONLY=ledger benches/load.sh   # the SQLite ledger on tmpfs: its
#                                   # cost without the disk's (default: a /tmp directory)
#   KEEP_WORK=1 benches/load.sh     # keep the run's /tmp directory (logs, configs)
#   ONLY=memory benches/load.sh     # only the memory section (a minute): RSS idle and
#                                   # holding IDLE_CONNS connections, nothing else run
#   ONLY=shared benches/load.sh     # only the cost of [limits] shared (no nginx): a
#                                   # redis-server on loopback started here, gateways
#                                   # measured in turns (SHARED_ROUNDS), ~4 minutes
#   ONLY=traces benches/load.sh     # only the cost of [telemetry] (no nginx): traces
#                                   # exported to the fast upstream at sampling 1.0
#                                   # and 0.01, against off, ~1 minute a round;
#                                   # TRACE_ROUNDS=3: off, 1.0 and 0.01 in turn three
#                                   # times, medians reported (a busy machine's drift
#                                   # then falls on all three alike)
#   PROFILE=submit benches/load.sh  # where the gateway's CPU goes under the submit load
#                                   # (perf; a build with line tables in target/profile);
#                                   # PROFILE=query: queries of a finished task;
#                                   # PROFILE=query-forwarded: of an unfinished one,
#                                   # poll cache off (each query goes upstream);
#                                   # PROFILE=submit-sqlite: submits, ledger on SQLite;
#                                   # PROFILE=submit-sqlite-money: the same, of a priced
#                                   # model by a key with a budget;
#                                   # PROFILE=submit-postgres: submits, ledger on a
#                                   # PostgreSQL cluster started here;
#                                   # PROFILE=submit-postgres-money: the same, of a
#                                   # priced model by a key with a budget;
#                                   # PROFILE=submit-traces (submit-traces-001): submits
#                                   # to a gateway exporting traces to the fast upstream
#                                   # at sampling 1.0 (0.01);
#                                   # PROFILE=submit-nginx: the same submits through
#                                   # nginx, its workers profiled (the baseline's share
#                                   # of kernel, system calls, context switches);
#                                   # PERF_CALLGRAPH=dwarf for call graphs through
#                                   # code built without frame pointers (libc)
#   PROFILE=submit COUNT=instructions benches/load.sh
#                                   # the gateway under callgrind instead: the
#                                   # instructions it runs per request, by function.
#                                   # Repeatable to about 0.1 % between runs, so a
#                                   # change of a per cent shows where timings are
#                                   # noise (not nginx, not kernel time;
#                                   # COUNT_REQUESTS=3000)
#
# Installs nginx and wrk with apt-get when missing (needs root), builds the release
# binary and the two helpers in examples/ (fast_upstream, loadgen), and prints a
# Markdown report (also written to target/load/report.md).
#
# Workloads: submit; query of an unfinished task; query of a finished task; a polling
# storm (1,000 connections polling 100 unfinished tasks); submit with the task ledger
# off, on SQLite and on PostgreSQL (started here when /usr/lib/postgresql is there). For each: throughput with
# wrk (closed loop, 64 connections), latency at a constant 1,000 req/s with
# `loadgen rate` (open loop), and the upstream's own request count. Then the RSS of
# mediagate idle and holding 10,000 idle keep-alive connections.
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh

DURATION=${DURATION:-10}       # seconds per run
CONNS=${CONNS:-64}             # wrk connections for throughput runs
RATE=${RATE:-1000}             # constant-rate latency runs
STORM_CONNS=${STORM_CONNS:-1000}
STORM_TASKS=${STORM_TASKS:-100}
IDLE_CONNS=${IDLE_CONNS:-10000}
POLL_TTL_MS=${POLL_TTL_MS:-1000}
ONLY=${ONLY:-all}              # all | ledger | memory | shared | traces
PROFILE=${PROFILE:-}           # submit | submit-sqlite | submit-sqlite-money | submit-postgres | submit-postgres-money | submit-traces | submit-traces-001 | submit-nginx | query | query-forwarded: profile that load, then stop
COUNT=${COUNT:-}               # instructions: with PROFILE, count with callgrind instead of sampling with perf
COUNT_REQUESTS=${COUNT_REQUESTS:-3000} # with COUNT: at least 250, counted in whole 250s
[[ -z $COUNT || ( $COUNT == instructions && -n $PROFILE && $PROFILE != submit-nginx ) ]] \
  || { echo "COUNT=instructions goes with PROFILE=submit, submit-sqlite, submit-sqlite-money, submit-postgres, submit-postgres-money, submit-traces, submit-traces-001, query or query-forwarded" >&2; exit 2; }
[[ -z $COUNT || $COUNT_REQUESTS -ge 250 ]] || { echo "COUNT_REQUESTS is at least 250" >&2; exit 2; }
[[ -z $PROFILE ]] || ONLY=profile
[[ $ONLY == all || $ONLY == ledger || $ONLY == memory || $ONLY == shared || $ONLY == traces || $ONLY == profile ]] \
  || { echo "ONLY is all, ledger, memory, shared or traces" >&2; exit 2; }
LAT_SECONDS=${LAT_SECONDS:-5}  # per constant-rate run
LAT_REPEAT=${LAT_REPEAT:-3}    # constant-rate runs per cell (median reported)
SHARED_ROUNDS=${SHARED_ROUNDS:-3} # ONLY=shared: saturated runs per gateway, in turns (median reported)
TRACE_ROUNDS=${TRACE_ROUNDS:-1} # ONLY=traces: rounds of off, 1.0 and 0.01 in turn (medians reported)
OUT=target/load
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/mediagate-load.XXXXXX)
# Where the SQLite ledger is written: the file system decides much of its cost
# (LEDGER_DIR=/dev/shm shows the ledger without the disk's).
LEDGER_DIR=${LEDGER_DIR:-$WORK}
LEDGER_DB=$(mktemp -u "$LEDGER_DIR/mediagate-ledger.XXXXXX").db
KEY=sk-bench
SECRET=bench-task-secret-of-at-least-32-characters-$$
AUTH="Authorization: Bearer $KEY"
MODEL=bench-video
TASKS=/v2/model-center/tasks
BODY='{"model":"bench-video","prompt":"a red fox running through fresh snow at dawn, cinematic","duration":5,"aspect_ratio":"16:9","resolution":"720p"}'
PIDS=()
PG_STOP=()


cleanup() {
  stop_started
  # Gateways are started inside command substitutions: their pids are in files.
  for f in "$WORK"/mediagate*.pid; do [[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null || true; done
  if [[ -f $WORK/nginx.pid ]]; then kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true; fi
  if [[ -f $WORK/redis.pid ]]; then kill "$(cat "$WORK/redis.pid")" 2>/dev/null || true; fi
  if [[ ${#PG_STOP[@]} -gt 0 ]]; then "${PG_STOP[@]}" >/dev/null 2>&1 || true; rm -rf "$PG_DIR"; fi
  wait 2>/dev/null || true
  # A ledger written outside $WORK (LEDGER_DIR) is not left there.
  [[ $LEDGER_DIR == "$WORK" ]] || rm -f "$LEDGER_DB"{,-wal,-shm} "$LEDGER_DB-money"{,-wal,-shm} "$LEDGER_DB-priced"{,-wal,-shm}
  # Nor is $WORK: its SQLite ledger alone grows to hundreds of megabytes a run.
  # KEEP_WORK=1 keeps it (gateway logs, configs) to look at.
  remove_work
}
trap cleanup EXIT

# --- tools --------------------------------------------------------------------------
if [[ $ONLY == shared ]] && ! command -v redis-server >/dev/null; then
  log "installing redis-server"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
if [[ $ONLY != memory ]] && { ! command -v nginx >/dev/null || ! command -v wrk >/dev/null; }; then
  log "installing nginx and wrk"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx wrk >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

if [[ $ONLY == profile ]]; then
  command -v perf >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
  }
  if [[ $COUNT == instructions ]] && ! command -v valgrind >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
  fi
  # Line tables, so that perf names our functions, and frame pointers, so that its
  # call graphs (`perf report -G`) reach past our frames; kept apart from the shipped
  # build.
  export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
  export RUSTFLAGS="${RUSTFLAGS:-} -C force-frame-pointers=yes"
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/profile}
fi
log "building (release)"
cargo build --release --quiet --bin mediagate --example fast_upstream --example loadgen
BIN=${CARGO_TARGET_DIR:-target}/release
LOADGEN=$BIN/examples/loadgen
MEDIAGATE=${MEDIAGATE:-$BIN/mediagate}

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (( $(ulimit -n) < IDLE_CONNS + 1000 )); then
  log "ulimit -n is $(ulimit -n): fewer than $IDLE_CONNS idle connections can be held"
fi



rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# --- the fast upstream --------------------------------------------------------------
$BIN/examples/fast_upstream --listen 127.0.0.1:0 >"$WORK/upstream.out" 2>&1 &
UP_PID=$!
PIDS+=($UP_PID)
UP_ADDR=$(wait_for "$WORK/upstream.out" "listening on" | awk '{print $3}')
UP=http://$UP_ADDR
upstream_requests() { curl -sf "$UP/_stats" | sed 's/.*"requests":\([0-9]*\).*/\1/'; }
log "fast upstream on $UP_ADDR"

# --- mediagate ----------------------------------------------------------------------
key_sha=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
routes() { # $1 = poll cache ttl (ms), $2 = ledger url (default none), $3 = money: a price and a budget, or priced: the price alone, $4 = [limits] shared: "URL" or "URL STOCK_MS", $5 = [telemetry]: "ENDPOINT RATIO"
  local budget="" price=""
  if [[ ${3:-} == money ]]; then
    # Far above what the runs spend: the budget is read and the estimate reserved on
    # every submit, never refused.
    budget='budget = { per_day = 1000000000, per_month = 1000000000 }'
  fi
  if [[ ${3:-} == money || ${3:-} == priced ]]; then
    price="price = { estimate = '(.duration // 5) * 0.05', settle = '(\$answer.seconds // .duration // 5) * 0.05' }"
  fi
  cat <<EOF
[ledger]
url = "${2:-none}"

# The fast upstream's result links lead nowhere: nothing to copy.
[storage]
url = "none"

# The submit path is measured here; following thousands of benchmark tasks in the
# background would be counted against it.
[tracker]
enabled = false

[server]
listen = "127.0.0.1:0"
max_body_bytes = 4194304
request_timeout_ms = 120000
shutdown_grace_ms = 1000
log_format = "text"
# Every load client is on loopback: one address, so no per-address cap here.
max_connections_per_ip = 0
# The header timeout also closes idle keep-alive connections (hyper): long enough that
# all the held connections are still open when the RSS is read on a busy machine.
header_read_timeout_ms = 60000

[tasks]
secret_env = "MEDIAGATE_TASK_SECRET"
terminal_cache_ttl_ms = 3600000
poll_cache_ttl_ms = $1

# The per-key limiters stay in the path (their cost is measured) but far above the
# offered load: the default 100 req/s would turn the runs into 429s.
[limits]
rate_per_second = 1000000
burst = 1000000
max_concurrent_requests = 100000
$([[ -z ${4:-} ]] || printf 'shared = "%s"\n%s\n%s\n' "${4%% *}" \
  "# Requests that ask Redis wait for it: a saturated machine answers past the default 50 ms," \
  "shared_timeout_ms = 1000")
$([[ ${4:-} != *" "* ]] || printf 'shared_stock_ms = %s\n' "${4#* }")

$([[ -z ${5:-} ]] || printf '[telemetry]\notlp_endpoint = "%s"\nsampling_ratio = %s\n' "${5% *}" "${5#* }")

[[keys]]
name = "bench"
sha256 = "$key_sha"
$budget

$(fast_provider "$UP")

[schemas.video]
required = ["prompt"]
[schemas.video.properties]
prompt = { type = "string", minLength = 1, maxLength = 10000 }
duration = { type = "integer", minimum = 1 }
aspect_ratio = { type = "string", pattern = "^[1-9][0-9]*:[1-9][0-9]*\$" }
resolution = { type = "string", minLength = 1 }
generate_audio = { type = "boolean" }
first_image = { type = "string", pattern = "^(https?://|data:)" }
last_image = { type = "string", pattern = "^(https?://|data:)" }
reference_images = { type = "array", items = { type = "string", pattern = "^(https?://|data:)" } }

[families.bench]
kind = "video"
providers = ["fast"]
models = ["$MODEL"]
schema = "video"
# The benchmark body names its duration; the family still has to say its default.
default_seconds = 5
$price
EOF
}


start_gateway() { # $1 = name, $2 = poll ttl, $3 = ledger url, $4 = money, $5 = shared limits URL, $6 = telemetry; prints the address
  local name=$1
  routes "$2" "${3:-none}" "${4:-}" "${5:-}" "${6:-}" >"$WORK/$name.toml"
  MEDIAGATE_TASK_SECRET=$SECRET RUST_LOG=${RUST_LOG:-info} \
    ${GATEWAY_UNDER[@]+"${GATEWAY_UNDER[@]}"} "$MEDIAGATE" serve --config "$WORK/$name.toml" >/dev/null 2>"$WORK/$name.log" &
  echo $! >"$WORK/$name.pid"
  wait_for "$WORK/$name.log" "listening on http://" | sed 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/'
}

# --- nginx --------------------------------------------------------------------------
# A plain reverse proxy to the same upstream: the baseline. Sets NG_ADDR.
start_nginx() {
  NG_PORT=$(free_port)
  mkdir -p "$WORK/nginx"
  cat >"$WORK/nginx.conf" <<EOF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
worker_rlimit_nofile 20000;
events { worker_connections 10000; }
http {
  access_log $WORK/nginx-access.log;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  upstream fast {
    server $UP_ADDR;
    keepalive 256;
  }
  server {
    listen 127.0.0.1:$NG_PORT;
    location / {
      proxy_pass http://fast;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
  "$NGINX" -c "$WORK/nginx.conf" -p "$WORK/nginx" -g 'daemon on;'
  NG_ADDR=127.0.0.1:$NG_PORT
  for _ in $(seq 1 50); do curl -sf "http://$NG_ADDR/_stats" >/dev/null && break; sleep 0.1; done
  log "nginx $("$NGINX" -v 2>&1 | cut -d/ -f2) on $NG_ADDR"
}

# COUNT=instructions: every gateway runs under callgrind, counting nothing until the
# load is warm (callgrind_control -i on).
GATEWAY_UNDER=()
[[ $COUNT != instructions ]] || GATEWAY_UNDER=(valgrind --tool=callgrind --instr-atstart=no \
  --callgrind-out-file="$WORK/callgrind.out.%p")
MG_ADDR=$(start_gateway mediagate "$POLL_TTL_MS")
MG_PID=$(cat "$WORK/mediagate.pid")
sleep 1
RSS_IDLE=$(rss_kb "$MG_PID")
if [[ $ONLY == all ]]; then
# The same gateway with the poll cache off: every query of an unfinished task is
# forwarded, which is the fair comparison with a proxy that caches nothing.
MGF_ADDR=$(start_gateway mediagate-nocache 0)
log "mediagate on $MG_ADDR (poll cache ${POLL_TTL_MS} ms), $MGF_ADDR (poll cache off)"

start_nginx

# --- tasks to query -----------------------------------------------------------------
submit_to() { # $1 = address; prints the id
  curl -sf -X POST "http://$1$TASKS" -H "$AUTH" -H 'Content-Type: application/json' \
    -d "$BODY" | sed 's/.*"id":"\([^"]*\)".*/\1/'
}
UNFINISHED_UP=$(submit_to "$UP_ADDR")
UNFINISHED_MG=$(submit_to "$MG_ADDR")
UNFINISHED_MGF=$(submit_to "$MGF_ADDR")
FINISHED_UP=sim-1000-vo-000000000000
seal() { $LOADGEN seal --secret "$SECRET" --provider fast --upstream-id "$1" --model "$MODEL" --owner bench; }
FINISHED_MG=$(seal "$FINISHED_UP")
curl -sf "http://$MG_ADDR$TASKS/$FINISHED_MG" -H "$AUTH" | grep -q '"completed"' \
  || { echo "the finished task does not read as completed through mediagate" >&2; exit 1; }
curl -sf "http://$MG_ADDR$TASKS/$UNFINISHED_MG" -H "$AUTH" | grep -q '"queued"' \
  || { echo "the unfinished task does not read as queued through mediagate" >&2; exit 1; }
fi # ONLY == all

# --- wrk ----------------------------------------------------------------------------
cat >"$WORK/submit.lua" <<EOF
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
EOF
cat >"$WORK/get.lua" <<EOF
wrk.headers["Authorization"] = "Bearer $KEY"
EOF
storm_lua() { # $@ = paths
  {
    echo 'wrk.headers["Authorization"] = "Bearer '"$KEY"'"'
    echo 'local paths = {'
    for p in "$@"; do echo "  \"$p\","; done
    echo '}'
    echo 'local i = math.random(#paths)'
    echo 'request = function() i = i % #paths + 1; return wrk.format(nil, paths[i]) end'
  }
}

to_us() { # "1.23ms" → 1230
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u);
    if (u == "us") f = 1; else if (u == "ms") f = 1000; else if (u == "s") f = 1000000; else f = 1;
    printf "%d", n * f }'
}

# CPU time (user + system, clock ticks) used so far by the processes serving a URL:
# the upstream for direct runs, the nginx workers, or the gateway.
CLK_TCK=$(getconf CLK_TCK)
serving_pids() { # $1 = URL
  case $1 in
    *"//$UP_ADDR/"*) echo "$UP_PID" ;;
    *"//${NG_ADDR:-none}/"*) pgrep -P "$(cat "$WORK/nginx.pid")" ;;
    *"//$MG_ADDR/"*) cat "$WORK/mediagate.pid" ;;
    *"//${MGF_ADDR:-none}/"*) cat "$WORK/mediagate-nocache.pid" ;;
    *"//${MGS_ADDR:-none}/"*) cat "$WORK/mediagate-sqlite.pid" ;;
    *"//${MGP_ADDR:-none}/"*) cat "$WORK/mediagate-pg.pid" ;;
    *"//${MGM_ADDR:-none}/"*) cat "$WORK/mediagate-sqlite-money.pid" ;;
    *"//${MGPM_ADDR:-none}/"*) cat "$WORK/mediagate-pg-money.pid" ;;
    *"//${MGMP_ADDR:-none}/"*) cat "$WORK/mediagate-sqlite-priced.pid" ;;
    *"//${MGPP_ADDR:-none}/"*) cat "$WORK/mediagate-pg-priced.pid" ;;
    *"//${MGT1_ADDR:-none}/"*) cat "$WORK/mediagate-traces-1.pid" ;;
    *"//${MGT001_ADDR:-none}/"*) cat "$WORK/mediagate-traces-001.pid" ;;
    *"//${MGR_ADDR:-none}/"*) cat "$WORK/mediagate-redis.pid" ;;
    *"//${MGE_ADDR:-none}/"*) cat "$WORK/mediagate-redis-exact.pid" ;;
  esac
}
cpu_ticks() { # $@ = pids
  for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat"; done | awk '{s += $1} END {print s + 0}'
}

# wrk: prints "rps p50_us p99_us errors cpu_us_per_request"
run_wrk() { # $1 = conns, $2 = script, $3 = url
  local out pids t0 t1
  pids=$(serving_pids "$3")
  t0=$(cpu_ticks $pids)
  out=$(wrk -t2 -c"$1" -d"${DURATION}s" --timeout 5s --latency -s "$2" "$3" 2>&1)
  t1=$(cpu_ticks $pids)
  echo "$out" >>"$WORK/wrk.log"
  local rps p50 p99 errs n
  rps=$(echo "$out" | awk '/^Requests\/sec/ {printf "%d", $2}')
  p50=$(to_us "$(echo "$out" | awk '$1 == "50%" {print $2}')")
  p99=$(to_us "$(echo "$out" | awk '$1 == "99%" {print $2}')")
  errs=$(echo "$out" | awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {printf "%d", n}')
  n=$(echo "$out" | awk '/requests in/ {print $1}')
  echo "$rps $p50 $p99 $errs $(awk -v t=$(( t1 - t0 )) -v n="$n" -v hz="$CLK_TCK" 'BEGIN { if (n > 0) printf "%.1f", t * 1e6 / hz / n; else print "-" }')"
}

# --- profile ------------------------------------------------------------------------
# perf samples the gateway (on-CPU, every thread) while wrk drives one load; the
# report lists the functions that took the most of its CPU, by themselves.
if [[ $ONLY == profile ]]; then
  if [[ $PROFILE == submit-sqlite ]]; then
    MG_ADDR=$(start_gateway mediagate-sqlite "$POLL_TTL_MS" "sqlite://$LEDGER_DB")
    MG_PID=$(cat "$WORK/mediagate-sqlite.pid")
  elif [[ $PROFILE == submit-sqlite-money ]]; then
    MG_ADDR=$(start_gateway mediagate-sqlite-money "$POLL_TTL_MS" "sqlite://$LEDGER_DB" money)
    MG_PID=$(cat "$WORK/mediagate-sqlite-money.pid")
  elif [[ $PROFILE == submit-postgres ]]; then
    start_postgres || exit 1
    MG_ADDR=$(start_gateway mediagate-pg "$POLL_TTL_MS" "postgres://postgres@127.0.0.1:$PG_PORT/postgres")
    MG_PID=$(cat "$WORK/mediagate-pg.pid")
  elif [[ $PROFILE == submit-postgres-money ]]; then
    start_postgres || exit 1
    MG_ADDR=$(start_gateway mediagate-pg-money "$POLL_TTL_MS" "postgres://postgres@127.0.0.1:$PG_PORT/postgres" money)
    MG_PID=$(cat "$WORK/mediagate-pg-money.pid")
  elif [[ $PROFILE == submit-traces || $PROFILE == submit-traces-001 ]]; then
    # Spans exported to the fast upstream, which accepts OTLP posts.
    RATIO=$([[ $PROFILE == submit-traces ]] && echo 1.0 || echo 0.01)
    MG_ADDR=$(start_gateway mediagate-traces "$POLL_TTL_MS" none "" "" "$UP $RATIO")
    MG_PID=$(cat "$WORK/mediagate-traces.pid")
  elif [[ $PROFILE == query-forwarded ]]; then
    MG_ADDR=$(start_gateway mediagate-nocache 0)
    MG_PID=$(cat "$WORK/mediagate-nocache.pid")
  fi
  # Whom perf watches: the gateway, or for the baseline nginx's workers.
  PROFILED=$MG_PID
  PROFILED_NAME="mediagate $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  if [[ $PROFILE == submit-nginx ]]; then
    start_nginx
    PROFILED=$(pgrep -P "$(cat "$WORK/nginx.pid")" | paste -sd,)
    PROFILED_NAME="nginx $("$NGINX" -v 2>&1 | cut -d/ -f2) (the baseline)"
  fi
  case $PROFILE in
    submit|submit-sqlite|submit-sqlite-money|submit-postgres|submit-postgres-money|submit-traces|submit-traces-001) PROFILE_ARGS=(-s "$WORK/submit.lua" "http://$MG_ADDR$TASKS") ;;
    submit-nginx) PROFILE_ARGS=(-s "$WORK/submit.lua" "http://$NG_ADDR$TASKS") ;;
    query) # a task the fast upstream reports finished (created in 1970)
      FINISHED=$($LOADGEN seal --secret "$SECRET" --provider fast \
        --upstream-id sim-1000-vo-000000000000 --model "$MODEL" --owner bench)
      PROFILE_ARGS=(-s "$WORK/get.lua" "http://$MG_ADDR$TASKS/$FINISHED") ;;
    query-forwarded) # a task still queued upstream, each query forwarded (poll cache off)
      UNFINISHED=$(curl -sf -X POST "http://$MG_ADDR$TASKS" -H "$AUTH" \
        -H 'Content-Type: application/json' -d "$BODY" | sed 's/.*"id":"\([^"]*\)".*/\1/')
      PROFILE_ARGS=(-s "$WORK/get.lua" "http://$MG_ADDR$TASKS/$UNFINISHED") ;;
    *) echo "PROFILE is submit, submit-sqlite, submit-sqlite-money, submit-postgres, submit-postgres-money, submit-traces, submit-traces-001, submit-nginx, query or query-forwarded" >&2; exit 2 ;;
  esac
  if [[ $COUNT == instructions ]]; then
    # The same load from loadgen at a rate callgrind keeps up with (250 a second, for
    # COUNT_REQUESTS / 250 seconds); the gateway's instructions counted over those
    # requests once warm, and divided by their number (every one must have succeeded).
    echo "$BODY" >"$WORK/body.json"
    LOAD=(--addr "$MG_ADDR" --conns 16 --header "$AUTH" --path "${PROFILE_ARGS[-1]#"http://$MG_ADDR"}")
    [[ $PROFILE != submit* ]] || LOAD+=(--method POST --body-file "$WORK/body.json" --header "Content-Type: application/json")
    # callgrind_control's own chatter is dropped, its complaints are not.
    control() { local out; out=$(callgrind_control "$@" "$MG_PID" 2>&1) || { echo "callgrind_control $*: $out" >&2; exit 1; }; }
    log "warming up, then counting $(( COUNT_REQUESTS / 250 * 250 )) requests: $PROFILE"
    $LOADGEN rate --rate 200 --seconds 2 "${LOAD[@]}" >/dev/null
    control -i on
    control -z
    COUNTED=$($LOADGEN rate --rate 250 --seconds $(( COUNT_REQUESTS / 250 )) "${LOAD[@]}")
    control -d
    N=$(echo "$COUNTED" | sed 's/.*requests=\([0-9]*\).*/\1/')
    FAILED=$(echo "$COUNTED" | sed 's/.* failed=\([0-9]*\).*/\1/')
    [[ $FAILED == 0 ]] || { echo "$FAILED of the $N counted requests failed: $COUNTED" >&2; exit 1; }
    DUMP=$WORK/callgrind.out.$MG_PID.1
    REPORT=$OUT/instructions-$PROFILE.txt
    # Functions only (--auto=no): no source lines among them.
    callgrind_annotate --inclusive=yes --auto=no --threshold=99 "$DUMP" >"$WORK/annotate.txt"
    {
      echo "# PROFILE=$PROFILE COUNT=instructions benches/load.sh: $PROFILED_NAME, $(date -u '+%Y-%m-%d %H:%M UTC')"
      echo "# Machine: $(nproc) CPUs, $(cpu_model)"
      echo "# loadgen: $COUNTED"
      awk -v n="$N" '/PROGRAM TOTALS/ { gsub(",", "", $1); printf "# %.0f user-space instructions per request (%s requests)\n", $1 / n, n }' "$WORK/annotate.txt"
      echo "# Instructions per request by function, inclusive of what it calls (callgrind_annotate --inclusive=yes)"
      awk -v n="$N" '/^ *[0-9,]+ \([ 0-9.]+%\)/ && !/PROGRAM TOTALS/ {
        v = $1; gsub(",", "", v); $1 = sprintf("%9.0f", v / n); print }' "$WORK/annotate.txt" | sed -n 1,80p
    } >"$REPORT"
    cp "$DUMP" "$OUT/instructions-$PROFILE.callgrind"
    cat "$REPORT"
    log "report in $REPORT; callers and callees: callgrind_annotate --tree=both $OUT/instructions-$PROFILE.callgrind"
    exit 0
  fi
  log "profiling: $PROFILE (${DURATION} s)"
  perf record -F 999 --call-graph "${PERF_CALLGRAPH:-fp}" -p "$PROFILED" -o "$WORK/perf.data" -- sleep "$DURATION" 2>"$WORK/perf.log" &
  PERF_PID=$!
  wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency "${PROFILE_ARGS[@]}" >"$WORK/profile-wrk.txt" 2>&1
  wait "$PERF_PID"
  # The same load again, counted rather than sampled: system calls and context
  # switches per request tell the kernel's share apart from the code's.
  perf stat -e raw_syscalls:sys_enter,context-switches,task-clock -p "$PROFILED" \
    -o "$WORK/perf-stat.txt" -- sleep "$DURATION" 2>/dev/null &
  PERF_PID=$!
  wrk -t2 -c"$CONNS" -d"${DURATION}s" "${PROFILE_ARGS[@]}" >"$WORK/profile-wrk-stat.txt" 2>&1
  wait "$PERF_PID"
  STAT_REQS=$(awk '/requests in/ {print $1}' "$WORK/profile-wrk-stat.txt")
  REPORT=$OUT/profile-$PROFILE.txt
  {
    echo "# PROFILE=$PROFILE benches/load.sh: $PROFILED_NAME, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# Machine: $(nproc) CPUs, $(cpu_model)"
    grep -E 'Requests/sec|requests in' "$WORK/profile-wrk.txt" | sed 's/^/# /'
    awk -v n="$STAT_REQS" '{ gsub(",", "", $1) }
      $2 == "raw_syscalls:sys_enter" { printf "# per request (perf stat, %d requests): %.2f system calls, ", n, $1 / n }
      $2 == "context-switches" { printf "%.2f context switches, ", $1 / n }
      $3 == "task-clock" { printf "%.1f CPU µs\n", $1 * 1000 / n }' "$WORK/perf-stat.txt"
    echo "# Self time by shared object, then by function (perf report --no-children)"
    perf report -i "$WORK/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null >"$WORK/by-dso.txt"
    grep -v -e '^#' -e '^$' "$WORK/by-dso.txt" | sed -n 1,15p
    echo
    perf report -i "$WORK/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null >"$WORK/by-sym.txt"
    grep -v -e '^#' -e '^$' "$WORK/by-sym.txt" | sed -n 1,60p
  } >"$REPORT"
  cp "$WORK/perf.data" "$OUT/profile-$PROFILE.data"
  cat "$REPORT"
  log "report in $REPORT; call graphs: perf report -i $OUT/profile-$PROFILE.data"
  exit 0
fi

ROWS=()
row() { ROWS+=("$*"); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

throughput() { # $1 = label, $2 = script, $3..5 = direct, nginx, mediagate URLs
  local label=$1 script=$2 d n m
  log "throughput: $label"
  d=($(run_wrk "$CONNS" "$script" "$3"))
  n=($(run_wrk "$CONNS" "$script" "$4"))
  m=($(run_wrk "$CONNS" "$script" "$5"))
  row "| $label | ${d[0]} | ${n[0]} | ${m[0]} | $(ratio "${m[0]}" "${n[0]}") | $(ratio "${m[0]}" "${d[0]}") | ${d[1]} / ${d[2]} | ${n[1]} / ${n[2]} | ${m[1]} / ${m[2]} | ${d[4]} / ${n[4]} / ${m[4]} | $(ratio "${m[4]}" "${n[4]}") | ${d[3]}/${n[3]}/${m[3]} |"
}

LAT_ROWS=()
# loadgen rate, LAT_REPEAT times: prints the median p50, the median p99 and the
# total of failed requests. The median of several p99s keeps one scheduling hiccup
# of a shared machine from deciding the figure.
run_rate() { # $1 = addr, $2 = path, rest = extra args
  local addr=$1 path=$2; shift 2
  local out all=""
  for _ in $(seq 1 "$LAT_REPEAT"); do
    out=$($LOADGEN rate --addr "$addr" --rate "$RATE" --seconds "$LAT_SECONDS" --conns 50 \
          --path "$path" --header "$AUTH" "$@")
    echo "$addr $path $out" >>"$WORK/rate.log"
    all+="$out"$'\n'
  done
  field() { echo -n "$all" | sed -n "s/.* $1=\([0-9]*\).*/\1/p"; }
  median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  echo "$(field p50_us | median) $(field p99_us | median) $(field failed | awk '{ s += $1 } END { print s }')"
}

latency() { # $1 = label, $2..4 = direct, nginx, mediagate paths, rest = extra args
  local label=$1 dp=$2 np=$3 mp=$4 d n m; shift 4
  log "latency at $RATE req/s: $label"
  d=($(run_rate "$UP_ADDR" "$dp" "$@"))
  n=($(run_rate "$NG_ADDR" "$np" "$@"))
  m=($(run_rate "$MG_ADDR_FOR_LAT" "$mp" "$@"))
  LAT_ROWS+=("| $label | ${d[0]} / ${d[1]} | ${n[0]} / ${n[1]} | ${m[0]} / ${m[1]} | $(( m[1] - d[1] )) | $(( m[1] - n[1] )) | ${d[2]}/${n[2]}/${m[2]} |")
}

echo "$BODY" >"$WORK/body.json"
SUBMIT_ARGS=(--method POST --body-file "$WORK/body.json" --header "Content-Type: application/json")

if [[ $ONLY == all ]]; then
# --- throughput ---------------------------------------------------------------------
throughput "submit" "$WORK/submit.lua" \
  "http://$UP_ADDR$TASKS" "http://$NG_ADDR$TASKS" "http://$MG_ADDR$TASKS"
throughput "query, unfinished (poll cache ${POLL_TTL_MS} ms)" "$WORK/get.lua" \
  "http://$UP_ADDR$TASKS/$UNFINISHED_UP" "http://$NG_ADDR$TASKS/$UNFINISHED_UP" "http://$MG_ADDR$TASKS/$UNFINISHED_MG"
throughput "query, unfinished (poll cache off)" "$WORK/get.lua" \
  "http://$UP_ADDR$TASKS/$UNFINISHED_UP" "http://$NG_ADDR$TASKS/$UNFINISHED_UP" "http://$MGF_ADDR$TASKS/$UNFINISHED_MGF"
throughput "query, finished" "$WORK/get.lua" \
  "http://$UP_ADDR$TASKS/$FINISHED_UP" "http://$NG_ADDR$TASKS/$FINISHED_UP" "http://$MG_ADDR$TASKS/$FINISHED_MG"

# Finished tasks must never reach the upstream once cached.
before=$(upstream_requests)
wrk -t1 -c8 -d2s -s "$WORK/get.lua" "http://$MG_ADDR$TASKS/$FINISHED_MG" >/dev/null 2>&1
FINISHED_UPSTREAM=$(( $(upstream_requests) - before ))

# --- latency at a constant rate -----------------------------------------------------
MG_ADDR_FOR_LAT=$MG_ADDR
latency "submit" "$TASKS" "$TASKS" "$TASKS" "${SUBMIT_ARGS[@]}"
latency "query, unfinished (poll cache ${POLL_TTL_MS} ms)" \
  "$TASKS/$UNFINISHED_UP" "$TASKS/$UNFINISHED_UP" "$TASKS/$UNFINISHED_MG"
MG_ADDR_FOR_LAT=$MGF_ADDR
latency "query, unfinished (poll cache off)" \
  "$TASKS/$UNFINISHED_UP" "$TASKS/$UNFINISHED_UP" "$TASKS/$UNFINISHED_MGF"
MG_ADDR_FOR_LAT=$MG_ADDR
latency "query, finished" "$TASKS/$FINISHED_UP" "$TASKS/$FINISHED_UP" "$TASKS/$FINISHED_MG"

# --- polling storm ------------------------------------------------------------------
log "polling storm: $STORM_CONNS connections, $STORM_TASKS tasks"
up_paths=(); mg_paths=()
for _ in $(seq 1 "$STORM_TASKS"); do
  up_paths+=("$TASKS/$(submit_to "$UP_ADDR")")
  mg_paths+=("$TASKS/$(submit_to "$MG_ADDR")")
done
storm_lua "${up_paths[@]}" >"$WORK/storm-up.lua"
storm_lua "${mg_paths[@]}" >"$WORK/storm-mg.lua"
storm() { # $1 = script, $2 = base URL; prints "rps p50 p99 errors cpu_us upstream_requests"
  local before r
  before=$(upstream_requests)
  r=$(run_wrk "$STORM_CONNS" "$1" "$2")
  echo "$r $(( $(upstream_requests) - before ))"
}
sd=($(storm "$WORK/storm-up.lua" "http://$UP_ADDR/"))
sn=($(storm "$WORK/storm-up.lua" "http://$NG_ADDR/"))
sm=($(storm "$WORK/storm-mg.lua" "http://$MG_ADDR/"))
# At most one upstream request per task per cache interval (+1 per task for the
# interval in progress when the run starts).
STORM_LIMIT=$(( STORM_TASKS * (DURATION * 1000 / POLL_TTL_MS + 1) ))
fi # ONLY == all

# --- the cost of shared limits --------------------------------------------------------
if [[ $ONLY == all || $ONLY == shared ]]; then
# The same submit load against the gateway without shared limits (the one measured
# above) and two whose per-key limits are held in a redis-server on loopback: with
# cells and places held ahead (the default) and with every request asking Redis
# (shared_stock_ms = 0). The gateways are measured in turns, round after round, so
# that a shared machine's load moves all rows alike: the gateway's CPU per request,
# Redis's beside it, the scripts Redis ran, and p50/p99 at $RATE req/s.
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
  --pidfile "$WORK/redis.pid" --daemonize yes >/dev/null
for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
REDIS_PID=$(cat "$WORK/redis.pid")
REDIS_VERSION=$(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/')
MGR_ADDR=$(start_gateway mediagate-redis "$POLL_TTL_MS" none "" "redis://127.0.0.1:$REDIS_PORT/0")
MGE_ADDR=$(start_gateway mediagate-redis-exact "$POLL_TTL_MS" none "" "redis://127.0.0.1:$REDIS_PORT/0 0")
SHARED_LABELS=("off" "Redis $REDIS_VERSION on loopback, cells held ahead (shared_stock_ms = 20)"
  "Redis $REDIS_VERSION on loopback, every request asks (shared_stock_ms = 0)")
SHARED_ADDRS=("$MG_ADDR" "$MGR_ADDR" "$MGE_ADDR")
SHARED_PIDS=("$MG_PID" "$(cat "$WORK/mediagate-redis.pid")" "$(cat "$WORK/mediagate-redis-exact.pid")")
per_request() { # $1 = clock ticks, $2 = requests: CPU µs per request
  awk -v t="$1" -v n="$2" -v hz="$CLK_TCK" 'BEGIN { if (n > 0) printf "%.1f", t * 1e6 / hz / n; else print "-" }'
}
# Scripts Redis ran (admissions and refills: EVALSHA, or EVAL when it lost them).
redis_scripts() {
  redis-cli -p "$REDIS_PORT" info commandstats \
    | awk -F'[=,:]' '/^cmdstat_eval(sha)?:/ { n += $3 } END { print n + 0 }'
}
per_call() { # $1 = scripts, $2 = requests
  awk -v s="$1" -v n="$2" 'BEGIN { if (n > 0) printf "%.3f", s / n; else print "-" }'
}
median_of() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
SAT_CPU=(); SAT_RPS=(); SAT_ERR=(); SAT_N=(); SAT_REDIS=(); SAT_SCRIPTS=()
RATE_TICKS=(); RATE_SCRIPTS=(); RATE_P50=(); RATE_P99=(); RATE_FAILED=()
for round in $(seq 1 "$SHARED_ROUNDS"); do
  for i in "${!SHARED_ADDRS[@]}"; do
    log "shared limits, saturated, round $round of $SHARED_ROUNDS: ${SHARED_LABELS[$i]}"
    r0=$(cpu_ticks "$REDIS_PID"); s0=$(redis_scripts)
    t=($(run_wrk "$CONNS" "$WORK/submit.lua" "http://${SHARED_ADDRS[$i]}$TASKS"))
    r1=$(cpu_ticks "$REDIS_PID"); s1=$(redis_scripts)
    n=$(tail -20 "$WORK/wrk.log" | awk '/requests in/ {n = $1} END {print n}')
    SAT_CPU[i]+="${t[4]} "; SAT_RPS[i]+="${t[0]} "; SAT_ERR[i]=$(( ${SAT_ERR[i]:-0} + t[3] ))
    SAT_N[i]=$(( ${SAT_N[i]:-0} + n )); SAT_REDIS[i]=$(( ${SAT_REDIS[i]:-0} + r1 - r0 ))
    SAT_SCRIPTS[i]=$(( ${SAT_SCRIPTS[i]:-0} + s1 - s0 ))
  done
done
# At a constant rate: a machine far from saturated, where nothing is shared between
# requests (no batching in the kernel or in Redis), and a serving thread that waits
# for Redis parks. One run of each gateway in turn, LAT_REPEAT times.
for round in $(seq 1 "$LAT_REPEAT"); do
  for i in "${!SHARED_ADDRS[@]}"; do
    log "shared limits, $RATE req/s, round $round of $LAT_REPEAT: ${SHARED_LABELS[$i]}"
    c0=$(cpu_ticks "${SHARED_PIDS[i]}"); s0=$(redis_scripts)
    out=$($LOADGEN rate --addr "${SHARED_ADDRS[$i]}" --rate "$RATE" --seconds "$LAT_SECONDS" --conns 50 \
          --path "$TASKS" --header "$AUTH" "${SUBMIT_ARGS[@]}")
    c1=$(cpu_ticks "${SHARED_PIDS[i]}"); s1=$(redis_scripts)
    echo "${SHARED_ADDRS[$i]} $TASKS $out" >>"$WORK/rate.log"
    RATE_TICKS[i]=$(( ${RATE_TICKS[i]:-0} + c1 - c0 )); RATE_SCRIPTS[i]=$(( ${RATE_SCRIPTS[i]:-0} + s1 - s0 ))
    RATE_P50[i]+="$(echo "$out" | sed -n 's/.* p50_us=\([0-9]*\).*/\1/p') "
    RATE_P99[i]+="$(echo "$out" | sed -n 's/.* p99_us=\([0-9]*\).*/\1/p') "
    RATE_FAILED[i]=$(( ${RATE_FAILED[i]:-0} + $(echo "$out" | sed -n 's/.* failed=\([0-9]*\).*/\1/p') ))
  done
done
SHARED_ROWS=()
RATE_N=$(( RATE * LAT_SECONDS * LAT_REPEAT ))
for i in "${!SHARED_ADDRS[@]}"; do
  cpu=$(echo "${SAT_CPU[i]}" | median_of)
  rate_cpu=$(per_request "${RATE_TICKS[i]}" "$RATE_N")
  p50=$(echo "${RATE_P50[i]}" | median_of); p99=$(echo "${RATE_P99[i]}" | median_of)
  [[ $i == 0 ]] && SHARED_OFF_CPU=$cpu SHARED_OFF_P99=$p99 SHARED_OFF_RATE_CPU=$rate_cpu
  SHARED_ROWS+=("| ${SHARED_LABELS[i]} | $(echo "${SAT_RPS[i]}" | median_of) | $cpu | $(ratio "$cpu" "$SHARED_OFF_CPU") | $(per_request "${SAT_REDIS[i]}" "${SAT_N[i]}") | $(per_call "${SAT_SCRIPTS[i]}" "${SAT_N[i]}") / $(per_call "${RATE_SCRIPTS[i]}" "$RATE_N") | ${SAT_ERR[i]} | $rate_cpu | $(ratio "$rate_cpu" "$SHARED_OFF_RATE_CPU") | $p50 / $p99 | $(( p99 - SHARED_OFF_P99 )) | ${RATE_FAILED[i]} |")
done
# Every request went through Redis or the stock, none decided alone.
SHARED_ALONE=$(cat "$WORK/mediagate-redis.log" "$WORK/mediagate-redis-exact.log" | grep -c "Redis does not answer" || true)
fi

# --- the cost of traces -------------------------------------------------------------
if [[ $ONLY == all || $ONLY == traces ]]; then
# The same submit load against the gateway without [telemetry] (the one measured
# above) and two exporting every span to the fast upstream (it accepts OTLP posts):
# at sampling 1.0 (every request: request, ledger-less upstream span) and 0.01.
MGT1_ADDR=$(start_gateway mediagate-traces-1 "$POLL_TTL_MS" none "" "" "$UP 1.0")
MGT001_ADDR=$(start_gateway mediagate-traces-001 "$POLL_TTL_MS" none "" "" "$UP 0.01")
TRACE_ROWS=()
declare -A TRACE_RUN=()
# The spans the fast upstream has received (it counts those of every OTLP export).
upstream_spans() { curl -sf "$UP/_stats" | sed 's/.*"spans":\([0-9]*\).*/\1/'; }
# Spans still queued in a traced gateway are exported within its export interval
# (5 s): waited for before the next count and the next CPU reading.
export_wait() { [[ $1 == off ]] || sleep 6; }
trace_cost() { # $1 = label, $2 = address, $3 = the gateway's pid, $4 = round
  local t l c0 c1 rate_cpu s0 s1 s2 n rate_n
  log "traces: $1 (round $4 of $TRACE_ROUNDS)"
  s0=$(upstream_spans)
  t=($(run_wrk "$CONNS" "$WORK/submit.lua" "http://$2$TASKS"))
  n=$(tail -20 "$WORK/wrk.log" | awk '/requests in/ {n = $1} END {print n}')
  export_wait "$1"
  s1=$(upstream_spans)
  c0=$(cpu_ticks "$3")
  l=($(run_rate "$2" "$TASKS" "${SUBMIT_ARGS[@]}"))
  c1=$(cpu_ticks "$3")
  export_wait "$1"
  s2=$(upstream_spans)
  rate_n=$(( RATE * LAT_SECONDS * LAT_REPEAT ))
  rate_cpu=$(awk -v t=$(( c1 - c0 )) -v n="$rate_n" -v hz="$CLK_TCK" \
    'BEGIN { if (n > 0) printf "%.1f", t * 1e6 / hz / n; else print "-" }')
  # rps, CPU, errors, CPU at the rate, p50, p99, failed; then against off's of the
  # round; then the spans exported per request, saturated and at the rate.
  TRACE_RUN[$1,$4]="${t[0]} ${t[4]} ${t[3]} $rate_cpu ${l[0]} ${l[1]} ${l[2]}"
  local off=(${TRACE_RUN[off,$4]})
  TRACE_RUN[$1,$4]+=" $(ratio "${t[4]}" "${off[1]}") $(ratio "$rate_cpu" "${off[3]}") $(( l[1] - off[5] ))"
  TRACE_RUN[$1,$4]+=" $(ratio $(( s1 - s0 )) "$n") $(ratio $(( s2 - s1 )) "$rate_n")"
}
for round in $(seq 1 "$TRACE_ROUNDS"); do
  trace_cost "off" "$MG_ADDR" "$MG_PID" "$round"
  trace_cost "sampling 1.0" "$MGT1_ADDR" "$(cat "$WORK/mediagate-traces-1.pid")" "$round"
  trace_cost "sampling 0.01" "$MGT001_ADDR" "$(cat "$WORK/mediagate-traces-001.pid")" "$round"
done
trace_median() { # $1 = label, $2 = field (0-based): its median over the rounds
  for round in $(seq 1 "$TRACE_ROUNDS"); do
    local v=(${TRACE_RUN[$1,$round]}); echo "${v[$2]}"
  done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
for label in "off" "sampling 1.0" "sampling 0.01"; do
  m=(); for f in $(seq 0 11); do m+=("$(trace_median "$label" "$f")"); done
  TRACE_ROWS+=("| $label | ${m[0]} | ${m[1]} | ${m[7]} | ${m[2]} | ${m[3]} | ${m[8]} | ${m[4]} / ${m[5]} | ${m[9]} | ${m[6]} | ${m[10]} / ${m[11]} |")
done
# grep -c exits 1 when no export failed, the case hoped for.
TRACE_FAILED=$({ grep -c "trace export failed" "$WORK/mediagate-traces-1.log" "$WORK/mediagate-traces-001.log" || true; } | awk -F: '{n += $2} END {print n + 0}')
fi

# --- the ledger's cost ---------------------------------------------------------------
if [[ $ONLY != memory && $ONLY != shared && $ONLY != traces ]]; then
# The same submit load against gateways whose ledger is off (the one measured above),
# on SQLite, and on PostgreSQL (a cluster of its own, when the binaries are there).
LEDGER_ROWS=()
ledger_cost() { # $1 = label, $2 = address
  local t l
  log "ledger: $1"
  t=($(run_wrk "$CONNS" "$WORK/submit.lua" "http://$2$TASKS"))
  MG_ADDR_FOR_LAT=$2
  l=($(run_rate "$2" "$TASKS" "${SUBMIT_ARGS[@]}"))
  # Against the ledger-off gateway of the same run: the machine is shared, so only
  # figures taken in the same minutes compare.
  [[ -z ${OFF_CPU:-} ]] && OFF_CPU=${t[4]} OFF_P99=${l[1]}
  LEDGER_ROWS+=("| $1 | ${t[0]} | ${t[4]} | $(ratio "${t[4]}" "$OFF_CPU") | ${t[3]} | ${l[0]} / ${l[1]} | $(( l[1] - OFF_P99 )) | ${l[2]} |")
}
ledger_cost "off" "$MG_ADDR"
MGS_ADDR=$(start_gateway mediagate-sqlite "$POLL_TTL_MS" "sqlite://$LEDGER_DB")
ledger_cost "SQLite (WAL, synchronous=NORMAL)" "$MGS_ADDR"
# The same with money: a priced model, a key with a budget (read and reserved on every
# submit, in the admission's transaction).
MGM_ADDR=$(start_gateway mediagate-sqlite-money "$POLL_TTL_MS" "sqlite://$LEDGER_DB-money" money)
ledger_cost "SQLite, priced, a budget" "$MGM_ADDR"
# Priced, by a key without a budget: what the budget adds is the difference of the two.
MGMP_ADDR=$(start_gateway mediagate-sqlite-priced "$POLL_TTL_MS" "sqlite://$LEDGER_DB-priced" priced)
ledger_cost "SQLite, priced, no budget" "$MGMP_ADDR"
if start_postgres; then
  MGP_ADDR=$(start_gateway mediagate-pg "$POLL_TTL_MS" "postgres://postgres@127.0.0.1:$PG_PORT/postgres")
  ledger_cost "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') (same machine)" "$MGP_ADDR"
  "${as_pg[@]}" "$PG_BIN/createdb" -h "$PG_DIR" -p "$PG_PORT" -U postgres money
  MGPM_ADDR=$(start_gateway mediagate-pg-money "$POLL_TTL_MS" "postgres://postgres@127.0.0.1:$PG_PORT/money" money)
  ledger_cost "PostgreSQL, priced, a budget" "$MGPM_ADDR"
  "${as_pg[@]}" "$PG_BIN/createdb" -h "$PG_DIR" -p "$PG_PORT" -U postgres priced
  MGPP_ADDR=$(start_gateway mediagate-pg-priced "$POLL_TTL_MS" "postgres://postgres@127.0.0.1:$PG_PORT/priced" priced)
  ledger_cost "PostgreSQL, priced, no budget" "$MGPP_ADDR"
fi
fi # ONLY != memory

# --- memory -------------------------------------------------------------------------
if [[ $ONLY != ledger && $ONLY != shared && $ONLY != traces ]]; then
sleep 1
RSS_AFTER=$(rss_kb "$MG_PID")
log "holding $IDLE_CONNS idle keep-alive connections"
$LOADGEN hold --addr "$MG_ADDR" --conns "$IDLE_CONNS" --path /healthz --seconds 20 >"$WORK/hold.out" &
HOLD_PID=$!
PIDS+=($HOLD_PID)
HELD=$(wait_for "$WORK/hold.out" holding)
# At once: the gateway closes a keep-alive connection idle for 60 s (routes above).
RSS_HELD=$(rss_kb "$MG_PID")
ESTABLISHED=$(ss -Htn state established "( sport = :${MG_ADDR##*:} )" | wc -l)
kill "$HOLD_PID" 2>/dev/null || true
wait "$HOLD_PID" 2>/dev/null || true
fi # ONLY != ledger

# --- report -------------------------------------------------------------------------
{
  echo "## Run of $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Machine: $(nproc) CPUs, $(cpu_model), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r)."
  if [[ $ONLY == memory || $ONLY == shared || $ONLY == traces ]]; then
  echo "Versions: mediagate $(git rev-parse --short HEAD 2>/dev/null || echo "?") ($MEDIAGATE), $(rustc --version)."
  else
  echo "Versions: mediagate $(git rev-parse --short HEAD 2>/dev/null || echo "?") ($MEDIAGATE), $(rustc --version), nginx $("$NGINX" -v 2>&1 | cut -d/ -f2), wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}')."
  fi
  echo "Command: \`benches/load.sh\` (ONLY=$ONLY DURATION=$DURATION CONNS=$CONNS RATE=$RATE LAT_SECONDS=$LAT_SECONDS LAT_REPEAT=$LAT_REPEAT$([[ $ONLY != traces && $ONLY != all ]] || echo " TRACE_ROUNDS=$TRACE_ROUNDS") STORM_CONNS=$STORM_CONNS STORM_TASKS=$STORM_TASKS IDLE_CONNS=$IDLE_CONNS POLL_TTL_MS=$POLL_TTL_MS)"
  echo
  if [[ $ONLY == all ]]; then
  echo "### Throughput (wrk -t2 -c$CONNS, ${DURATION} s per run; latency in µs)"
  echo
  echo "| workload | direct req/s | nginx req/s | mediagate req/s | mg/nginx | mg/direct | direct p50 / p99 | nginx p50 / p99 | mediagate p50 / p99 | CPU µs/req upstream / nginx / mediagate | CPU mg/nginx | errors d/n/m |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  echo "### Latency at a constant $RATE req/s (loadgen, 50 connections; median of $LAT_REPEAT runs of ${LAT_SECONDS} s; µs)"
  echo
  echo "| workload | direct p50 / p99 | nginx p50 / p99 | mediagate p50 / p99 | p99 added vs direct | p99 added vs nginx | failed d/n/m |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${LAT_ROWS[@]}"
  echo
  echo "### Polling storm ($STORM_CONNS connections, $STORM_TASKS unfinished tasks, ${DURATION} s, poll cache ${POLL_TTL_MS} ms)"
  echo
  echo "| target | req/s | p50 / p99 µs | CPU µs/req of the target | errors | upstream requests |"
  echo "|---|---|---|---|---|---|"
  echo "| direct | ${sd[0]} | ${sd[1]} / ${sd[2]} | ${sd[4]} | ${sd[3]} | ${sd[5]} |"
  echo "| nginx | ${sn[0]} | ${sn[1]} / ${sn[2]} | ${sn[4]} | ${sn[3]} | ${sn[5]} |"
  echo "| mediagate | ${sm[0]} | ${sm[1]} / ${sm[2]} | ${sm[4]} | ${sm[3]} | ${sm[5]} (limit $STORM_LIMIT) |"
  echo
  echo "mediagate/nginx in the storm: $(ratio "${sm[0]}" "${sn[0]}"); mediagate/direct: $(ratio "${sm[0]}" "${sd[0]}")."
  echo "Upstream requests caused by 2 s of queries of a finished task through mediagate: $FINISHED_UPSTREAM."
  echo
  fi
  if [[ $ONLY == all || $ONLY == shared ]]; then
  echo "### The cost of shared limits (submit; wrk -c$CONNS for throughput, $RATE req/s for latency)"
  echo
  echo "Per-key limits held in a redis-server on the same machine (\`[limits] shared\`), against the gateway without them in the same run; the gateways measured in turns, $SHARED_ROUNDS saturated runs and $LAT_REPEAT runs at $RATE req/s each (medians; CPU at $RATE req/s over all runs). Times Redis did not answer: $SHARED_ALONE."
  echo
  echo "| shared limits | submit req/s | CPU µs/req (gateway) | CPU vs off | Redis CPU µs/req | Redis scripts per request, saturated / at $RATE req/s | errors | CPU µs/req at $RATE req/s | CPU vs off at $RATE req/s | p50 / p99 µs at $RATE req/s | p99 added vs off | failed |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${SHARED_ROWS[@]}"
  echo
  fi
  if [[ $ONLY == all || $ONLY == traces ]]; then
  echo "### The cost of traces (submit; wrk -c$CONNS for throughput, $RATE req/s for latency)"
  echo
  echo "\`[telemetry]\` exporting to the fast upstream over OTLP/HTTP, against the gateway without it in the same run. Exports that failed (logged once per gateway): $TRACE_FAILED. A submit sampled makes 2 spans (request, upstream submit; no ledger), so 2.00 spans exported per request at 1.0 and about 0.02 at 0.01; fewer means the exporter's queue dropped spans."
  if (( TRACE_ROUNDS > 1 )); then
  echo "Medians of $TRACE_ROUNDS rounds (off, 1.0, 0.01 in turn); the ratios and the p99 added are the medians of each round's against that round's off. Every round:"
  echo
  for round in $(seq 1 "$TRACE_ROUNDS"); do
    echo "- round $round: $(for label in "off" "sampling 1.0" "sampling 0.01"; do v=(${TRACE_RUN[$label,$round]}); printf '%s %s µs/req (%s), %s µs/req at the rate (%s), p99 %s µs, spans/req %s / %s; ' "$label" "${v[1]}" "${v[7]}" "${v[3]}" "${v[8]}" "${v[5]}" "${v[10]}" "${v[11]}"; done)"
  done
  fi
  echo
  echo "| traces | submit req/s | CPU µs/req | CPU vs off | errors | CPU µs/req at $RATE req/s | CPU vs off at $RATE req/s | p50 / p99 µs at $RATE req/s | p99 added vs off | failed | spans exported per request, saturated / at $RATE req/s |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${TRACE_ROWS[@]}"
  echo
  fi
  if [[ $ONLY != memory && $ONLY != shared && $ONLY != traces ]]; then
  echo "### The ledger's cost (submit; wrk -c$CONNS for throughput, $RATE req/s for latency)"
  echo
  echo "SQLite file in $LEDGER_DIR ($(df --output=fstype "$LEDGER_DIR" | tail -1), $(df --output=source "$LEDGER_DIR" | tail -1))."
  echo
  echo "| ledger | submit req/s | CPU µs/req | CPU vs off | errors | p50 / p99 µs at $RATE req/s | p99 added vs off | failed |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${LEDGER_ROWS[@]}"
  echo
  fi
  if [[ $ONLY != ledger && $ONLY != shared && $ONLY != traces ]]; then
  echo "### Memory (mediagate VmRSS)"
  echo
  echo "| state | RSS |"
  echo "|---|---|"
  echo "| idle, after start | $(( RSS_IDLE / 1024 )) MiB ($RSS_IDLE kB) |"
  echo "| idle, $([[ $ONLY == memory ]] && echo 'a second later' || echo 'after the runs above') | $(( RSS_AFTER / 1024 )) MiB ($RSS_AFTER kB) |"
  echo "| $HELD; $ESTABLISHED established at the gateway port | $(( RSS_HELD / 1024 )) MiB ($RSS_HELD kB) |"
  echo
  echo "Per held connection: $(( (RSS_HELD - RSS_AFTER) * 1024 / (ESTABLISHED > 0 ? ESTABLISHED : 1) )) bytes."
  fi
} | tee "$OUT/report.md"
cp "$WORK/wrk.log" "$WORK/rate.log" "$OUT/" 2>/dev/null || true
