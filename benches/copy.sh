#!/usr/bin/env bash
# Durable results benchmark, all on 127.0.0.1: copying a completed task's result from
# an upstream into the gateway's storage, against `curl -o` of the same URL; then
# serving the stored result through its signed link, whole and by 1 MiB ranges,
# against nginx serving the same file from disk.
#
#   benches/copy.sh                     # everything, ~3 minutes after the build
#   SIZES="100 1024" benches/copy.sh    # the sizes copied into files, in MiB
#   S3_SIZES="100" benches/copy.sh      # the sizes copied into S3 (moto, installed by
#                                       # .ci/moto under the target dir); default: SIZES;
#                                       # "" for none
#   REPEAT=5 benches/copy.sh            # copies (and curl downloads) per size
#   KEEP_WORK=1 benches/copy.sh         # keep the run's /tmp directory
#
# Copies: for each size, a fast upstream (examples/fast_upstream.rs, `--result-bytes`:
# a task is completed at once, its link streams that many bytes from the upstream
# itself) and a gateway of its own (SQLite ledger, `[storage]` in the run's
# directory, tracker off). Each copy: a task is submitted, the gateway's CPU time
# (/proc/PID/stat) and VmRSS read and its VmHWM reset (/proc/PID/clear_refs), the task
# queried once (the gateway sees it completed and owes the copy), then the ledger's
# `copies` row polled until it is `stored`. The copy's time is the ledger's own:
# `finished_ms - created_ms` (from the completion recorded to the copy recorded
# stored). Alternating with the copies, `curl -o` downloads the same URL from the same
# upstream into the same file system: the baseline. Medians of REPEAT (each listed);
# the RSS growth (VmHWM during the copy minus VmRSS before it) of the first copy, which
# includes what a fresh gateway allocates once, and the largest of the others.
#
# S3: the same copies into moto (an S3 server in Python), each object deleted once
# measured. Its throughput is moto's; the gateway's CPU per GB and RSS are the
# gateway's. Baseline: one `curl -T` PUT (SigV4) of the same bytes into moto.
#
# Serving: the stored SERVE_SIZE result (default 100 MiB) through the gateway's signed
# link, and the same file from nginx (sendfile on, as a file server is configured, and
# off), with wrk: whole GETs on WHOLE_CONNS connections, random 1 MiB `Range` GETs on
# RANGE_CONNS, DURATION seconds each; CPU time of the gateway and of nginx's workers.
#
# Installs nginx, wrk and sqlite3 with apt-get when missing (needs root), builds the
# release binary and the fast upstream, prints a Markdown report (also written to
# target/copy/report.md). MB = 10^6 bytes, GB = 10^9.
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/lib.sh

SIZES=${SIZES-"100 300 1024"}   # MiB, into files
S3_SIZES=${S3_SIZES-$SIZES}     # MiB, into S3 (moto); empty: none
REPEAT=${REPEAT:-3}
SERVE_SIZE=${SERVE_SIZE:-100}   # MiB, one of SIZES; 0: no serving section
DURATION=${DURATION:-10}        # seconds per serving run
WHOLE_CONNS=${WHOLE_CONNS:-1}
RANGE_CONNS=${RANGE_CONNS:-8}
COPY_WAIT=${COPY_WAIT:-900}     # seconds one copy may take before the run gives up
(( REPEAT >= 1 )) || { echo "REPEAT is at least 1" >&2; exit 2; }
if (( SERVE_SIZE > 0 )) && [[ " $SIZES " != *" $SERVE_SIZE "* ]]; then
  echo "SERVE_SIZE ($SERVE_SIZE) is one of SIZES ($SIZES), or 0" >&2; exit 2
fi
MIB=1048576
OUT=target/copy
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/mediagate-copy.XXXXXX)
# nginx's workers (another user when started by root) reach the stored files.
chmod 711 "$WORK"
KEY=sk-bench
SECRET=copy-task-secret-of-at-least-32-characters-$$
AUTH="Authorization: Bearer $KEY"
TASKS=/v2/model-center/tasks
BODY='{"model":"bench-video","prompt":"a red fox running through fresh snow at dawn, cinematic"}'
CLK_TCK=$(getconf CLK_TCK)
PIDS=()

cleanup() {
  stop_started
  if [[ -f $WORK/nginx.pid ]]; then kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  remove_work
}
trap cleanup EXIT
trap 'echo "benches/copy.sh: failed at line $LINENO" >&2' ERR

# --- tools --------------------------------------------------------------------------
missing=()
for tool in nginx wrk sqlite3; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if (( ${#missing[@]} > 0 )); then
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
log "building (release)"
cargo build --release --quiet --bin mediagate --example fast_upstream
BIN=${CARGO_TARGET_DIR:-target}/release
MEDIAGATE=${MEDIAGATE:-$BIN/mediagate}

# --- measuring ----------------------------------------------------------------------
# Bash's own reads: no process started between two samples.
cpu_ticks() { local a; read -ra a <"/proc/$1/stat"; echo $(( a[13] + a[14] )); }
# CPU time of this shell's children waited for (curl, once it has exited).
children_ticks() { local a; read -ra a <"/proc/$$/stat"; echo $(( a[15] + a[16] )); }
mb_per_s() { awk -v b="$1" -v ms="$2" 'BEGIN { printf "%.0f", (ms > 0 ? b / 1e6 / (ms / 1000) : 0) }'; }
s_per_gb() { awk -v t="$1" -v b="$2" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", t / hz / (b / 1e9) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
maximum() { printf '%s\n' "$@" | sort -n | tail -1; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
seconds() { awk -v ms="$1" 'BEGIN { printf "%.2f", ms / 1000 }'; }
# "median (each)" of the throughputs of copies of $1 bytes that took $2.. ms.
each_mb_per_s() {
  local b=$1 all=() x; shift
  for x in "$@"; do all+=("$(mb_per_s "$b" "$x")"); done
  echo "$(mb_per_s "$b" "$(median "$@")") ($(printf '%s ' "${all[@]}" | sed 's/ $//'))"
}
# The RSS growth (kB) of the first copy, and the largest of the others, in MiB.
growths() {
  local first=$1; shift
  echo "$(mib "$first") / $( (( $# > 0 )) && mib "$(maximum "$@")" || echo -)"
}

# --- upstream and gateway -----------------------------------------------------------
key_sha=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)

# A fast upstream whose tasks are completed at once, their link `/media/{bytes}.bin`
# on itself; sets UP_PID and UP_ADDR.
start_upstream() { # $1 = bytes
  "$BIN/examples/fast_upstream" --listen 127.0.0.1:0 --queued-ms 0 --processing-ms 0 \
    --result-bytes "$1" >"$WORK/upstream-$1.out" 2>&1 &
  UP_PID=$!
  PIDS+=("$UP_PID")
  UP_ADDR=$(wait_for "$WORK/upstream-$1.out" "listening on" | awk '{print $3}')
}

routes() { # $1 = storage url, $2 = the gateway's directory
  cat <<EOF
[ledger]
url = "sqlite://$2/ledger.db"

[storage]
url = "$1"
max_in_flight = 1
copy_timeout_ms = $(( COPY_WAIT * 1000 ))

# A task is queried once, when it is due: that query records it completed.
[tracker]
enabled = false

[server]
listen = "127.0.0.1:0"
request_timeout_ms = 600000
shutdown_grace_ms = 1000
log_format = "text"
max_connections_per_ip = 0

[tasks]
secret_env = "MEDIAGATE_TASK_SECRET"
poll_cache_ttl_ms = 0

[limits]
rate_per_second = 0
max_concurrent_requests = 0

[[keys]]
name = "bench"
sha256 = "$key_sha"

$(fast_provider "http://$UP_ADDR")

[schemas.video]
required = ["prompt"]
[schemas.video.properties]
prompt = { type = "string", minLength = 1, maxLength = 10000 }

[families.bench]
kind = "video"
providers = ["fast"]
models = ["bench-video"]
schema = "video"
default_seconds = 5
max_result_bytes = 1099511627776
keep_days = 1
EOF
}

# A gateway on the upstream at UP_ADDR keeping results at $2, with the environment
# in GW_ENV; sets GW_PID, GW_ADDR, GW_DIR (its ledger is GW_DIR/ledger.db).
GW_ENV=()
start_gateway() { # $1 = name, $2 = storage url
  GW_DIR=$WORK/$1
  mkdir -p "$GW_DIR"
  routes "$2" "$GW_DIR" >"$GW_DIR/routes.toml"
  env ${GW_ENV[@]+"${GW_ENV[@]}"} MEDIAGATE_TASK_SECRET="$SECRET" RUST_LOG=${RUST_LOG:-info} \
    "$MEDIAGATE" serve --config "$GW_DIR/routes.toml" >/dev/null 2>"$GW_DIR/gateway.log" &
  GW_PID=$!
  PIDS+=("$GW_PID")
  GW_ADDR=$(wait_for "$GW_DIR/gateway.log" "listening on http://" | sed 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/')
}

stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

ledger() { sqlite3 -cmd '.timeout 5000' "$GW_DIR/ledger.db" "$1"; }

# One copy through the gateway at GW_ADDR; sets C_MS (the ledger's copy time), C_TICKS
# (the gateway's CPU), C_RSS (VmRSS before, kB), C_GROWTH (VmHWM during the copy
# minus C_RSS, kB), C_ROW (the task's ledger row), C_ID (the task's id).
copy_once() {
  local id status out state i
  id=$(curl -sf -X POST "http://$GW_ADDR$TASKS" -H "$AUTH" -H 'Content-Type: application/json' \
    -d "$BODY" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  C_ID=$id
  [[ -n $id ]] || { echo "the submit failed: $(tail -3 "$GW_DIR/gateway.log")" >&2; exit 1; }
  C_RSS=$(status_kb "$GW_PID" VmRSS)
  echo 5 >"/proc/$GW_PID/clear_refs" # VmHWM starts again from VmRSS
  local t0
  t0=$(cpu_ticks "$GW_PID")
  status=$(curl -sf "http://$GW_ADDR$TASKS/$id" -H "$AUTH" | sed -n 's/.*"status":"\([a-z]*\)".*/\1/p')
  [[ $status == completed ]] || { echo "the task is $status, not completed" >&2; exit 1; }
  for (( i = 0; i < COPY_WAIT * 10; i++ )); do
    out=$(ledger "SELECT state, attempts, finished_ms - created_ms, task_row, ifnull(last_error, '') FROM copies ORDER BY id DESC LIMIT 1")
    IFS='|' read -r state attempts C_MS C_ROW error <<<"$out"
    [[ $state == pending && $attempts == 0 ]] || break
    sleep 0.1
  done
  C_TICKS=$(( $(cpu_ticks "$GW_PID") - t0 ))
  C_GROWTH=$(( $(status_kb "$GW_PID" VmHWM) - C_RSS ))
  [[ $state == stored ]] || { echo "the copy is $state after $attempts attempts: $error" >&2; exit 1; }
}

# The stored result's SHA-256 and size in the ledger: "sha256|bytes".
stored_result() { ledger "SELECT sha256, bytes FROM results WHERE task_row = $1 AND n = 0"; }

# --- copies into files --------------------------------------------------------------
declare -A EXPECT_SHA
FILE_ROWS=()
SERVE_GW_PID="" SERVE_GW_ADDR="" SERVE_ID="" SERVE_FILE=""
for size in $SIZES; do
  bytes=$(( size * MIB ))
  start_upstream "$bytes"
  url="http://$UP_ADDR/media/$bytes.bin"
  start_gateway "files-$size" "file://$WORK/files-$size/media"
  rss_idle=$(status_kb "$GW_PID" VmRSS)
  log "files, $size MiB: $REPEAT copies, $REPEAT curl downloads (gateway $GW_ADDR, upstream $UP_ADDR)"
  ms=() ticks=() growth=() curl_ms=() curl_ticks=()
  for (( r = 1; r <= REPEAT; r++ )); do
    c0=$(children_ticks)
    out=$(curl -sf -o "$WORK/curl.bin" -w '%{size_download} %{time_total}' "$url")
    curl_ticks+=($(( $(children_ticks) - c0 )))
    read -r got secs <<<"$out"
    [[ $got == "$bytes" ]] || { echo "curl got $got bytes of $bytes" >&2; exit 1; }
    curl_ms+=("$(awk -v s="$secs" 'BEGIN { printf "%.0f", s * 1000 }')")
    if (( r == 1 )); then
      EXPECT_SHA[$size]=$(sha256sum "$WORK/curl.bin" | cut -d' ' -f1)
    fi
    rm -f "$WORK/curl.bin"
    copy_once
    ms+=("$C_MS") ticks+=("$C_TICKS") growth+=("$C_GROWTH")
    object=$GW_DIR/media/results/$C_ROW/0
    if (( r == 1 )); then
      # The copy is the upstream's bytes: in the ledger, and on disk.
      IFS='|' read -r sha stored_bytes <<<"$(stored_result "$C_ROW")"
      [[ $sha == "${EXPECT_SHA[$size]}" && $stored_bytes == "$bytes" ]] \
        || { echo "the ledger says $stored_bytes bytes, sha256 $sha" >&2; exit 1; }
      [[ $(sha256sum "$object" | cut -d' ' -f1) == "$sha" ]] \
        || { echo "$object is not what was downloaded" >&2; exit 1; }
    fi
    if (( size == SERVE_SIZE && r == REPEAT )); then
      SERVE_ID=$C_ID
      SERVE_FILE=$object
    else
      rm -f "$object"
    fi
  done
  m=$(median "${ms[@]}") t=$(median "${ticks[@]}") cm=$(median "${curl_ms[@]}") ct=$(median "${curl_ticks[@]}")
  FILE_ROWS+=("| $size MiB | $(seconds "$m") | $(each_mb_per_s "$bytes" "${ms[@]}") | $(each_mb_per_s "$bytes" "${curl_ms[@]}") | $(ratio "$cm" "$m") | $(s_per_gb "$t" "$bytes") | $(s_per_gb "$ct" "$bytes") | $(mib "$rss_idle") | $(growths "${growth[@]}") |")
  stop "$UP_PID"
  if (( size == SERVE_SIZE )); then
    SERVE_GW_PID=$GW_PID SERVE_GW_ADDR=$GW_ADDR
  else
    stop "$GW_PID"
  fi
done

# --- copies into S3 (moto) ----------------------------------------------------------
S3_ROWS=()
S3_NOTE=""
if [[ -n ${S3_SIZES// /} ]]; then
  log "installing moto (.ci/moto) when missing"
  if PYTHON=$(bash .ci/moto 2>"$WORK/moto-install.log"); then
    MOTO_PORT=$(free_port)
    "$PYTHON" -m moto.server -H 127.0.0.1 -p "$MOTO_PORT" >"$WORK/moto.log" 2>&1 &
    MOTO_PID=$!
    PIDS+=("$MOTO_PID")
    S3=http://127.0.0.1:$MOTO_PORT
    for _ in $(seq 1 300); do curl -s -o /dev/null "$S3/" && break; sleep 0.1; done
    curl -sf -X PUT "$S3/media" >/dev/null || { echo "moto: the bucket cannot be created" >&2; exit 1; }
    MOTO_VERSION=$("$PYTHON" -c 'import moto; print(moto.__version__)')
    GW_ENV=(AWS_ENDPOINT_URL="$S3" AWS_ACCESS_KEY_ID=bench-key AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1)
    # curl signing as the gateway does (SigV4): moto refuses an unsigned DELETE, or a
    # second unsigned PUT of a key.
    s3_curl() { curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user bench-key:bench-secret "$@"; }
    for size in $S3_SIZES; do
      bytes=$(( size * MIB ))
      start_upstream "$bytes"
      url="http://$UP_ADDR/media/$bytes.bin"
      curl -sf -o "$WORK/put.bin" "$url"
      [[ -n ${EXPECT_SHA[$size]:-} ]] || EXPECT_SHA[$size]=$(sha256sum "$WORK/put.bin" | cut -d' ' -f1)
      start_gateway "s3-$size" "s3://media/s3-$size"
      rss_idle=$(status_kb "$GW_PID" VmRSS)
      log "S3 (moto), $size MiB: $REPEAT copies, $REPEAT single PUTs (gateway $GW_ADDR, moto $S3)"
      ms=() ticks=() growth=() put_ms=()
      for (( r = 1; r <= REPEAT; r++ )); do
        secs=$(s3_curl -o /dev/null -T "$WORK/put.bin" -w '%{time_total}' "$S3/media/baseline-$size.bin")
        put_ms+=("$(awk -v s="$secs" 'BEGIN { printf "%.0f", s * 1000 }')")
        s3_curl -X DELETE "$S3/media/baseline-$size.bin" >/dev/null
        copy_once
        ms+=("$C_MS") ticks+=("$C_TICKS") growth+=("$C_GROWTH")
        key=s3-$size/results/$C_ROW/0
        if (( r == 1 )); then
          IFS='|' read -r sha stored_bytes <<<"$(stored_result "$C_ROW")"
          [[ $sha == "${EXPECT_SHA[$size]}" && $stored_bytes == "$bytes" ]] \
            || { echo "the ledger says $stored_bytes bytes, sha256 $sha" >&2; exit 1; }
          [[ $(curl -sf "$S3/media/$key" | sha256sum | cut -d' ' -f1) == "$sha" ]] \
            || { echo "the object in moto is not what was downloaded" >&2; exit 1; }
        fi
        s3_curl -X DELETE "$S3/media/$key" >/dev/null
      done
      rm -f "$WORK/put.bin"
      m=$(median "${ms[@]}") t=$(median "${ticks[@]}") pm=$(median "${put_ms[@]}")
      S3_ROWS+=("| $size MiB | $(seconds "$m") | $(each_mb_per_s "$bytes" "${ms[@]}") | $(each_mb_per_s "$bytes" "${put_ms[@]}") | $(ratio "$pm" "$m") | $(s_per_gb "$t" "$bytes") | $(mib "$rss_idle") | $(growths "${growth[@]}") |")
      stop "$UP_PID"
      stop "$GW_PID"
    done
    GW_ENV=()
    stop "$MOTO_PID"
  else
    S3_NOTE="moto could not be installed ($(tail -1 "$WORK/moto-install.log")): no S3 figures."
    log "$S3_NOTE"
  fi
fi

# --- serving the stored result ------------------------------------------------------
SERVE_ROWS=()
if (( SERVE_SIZE > 0 )); then
  serve_bytes=$(( SERVE_SIZE * MIB ))
  GW_PID=$SERVE_GW_PID GW_ADDR=$SERVE_GW_ADDR GW_DIR=$WORK/files-$SERVE_SIZE
  # The task's signed link, as a client gets it.
  link=$(curl -sf "http://$GW_ADDR$TASKS/$SERVE_ID" -H "$AUTH" | sed -n 's/.*"urls":\["\([^"]*\)".*/\1/p')
  [[ $link == "http://$GW_ADDR/"*"signature="* ]] || { echo "no signed link: $link" >&2; exit 1; }
  link_path=${link#"http://$GW_ADDR"}
  # nginx serving the very file the gateway serves: sendfile on (a file server's
  # configuration) on one port, off on another.
  NG_PORT=$(free_port)
  NG_PORT_COPY=$(free_port)
  mkdir -p "$WORK/nginx"
  cat >"$WORK/nginx.conf" <<EOF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log $WORK/nginx-access.log;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$NG_PORT;
    root $GW_DIR/media;
    sendfile on;
    tcp_nopush on;
  }
  server {
    listen 127.0.0.1:$NG_PORT_COPY;
    root $GW_DIR/media;
    sendfile off;
  }
}
EOF
  "$NGINX" -c "$WORK/nginx.conf" -p "$WORK/nginx" -g 'daemon on;'
  object_path=/${SERVE_FILE#"$GW_DIR/media/"}
  for _ in $(seq 1 50); do curl -sf -o /dev/null -r 0-0 "http://127.0.0.1:$NG_PORT$object_path" && break; sleep 0.1; done
  NG_WORKERS=$(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')
  # wrk's requests: the whole file, or a random 1 MiB range of it.
  cat >"$WORK/range.lua" <<EOF
math.randomseed(42)
local chunks = math.floor($serve_bytes / $MIB)
request = function()
  local first = math.random(0, chunks - 1) * $MIB
  return wrk.format("GET", wrk.path, { ["Range"] = "bytes=" .. first .. "-" .. (first + $MIB - 1) })
end
EOF
  # wrk against $2 with $3 connections, $4 bytes per answer, CPU of the pids in $5..;
  # prints "MB/s CPU_s_per_GB requests errors".
  serve_run() {
    local label=$1 url=$2 conns=$3 len=$4; shift 4
    local t0 t1 out reqs secs errs p
    t0=0; for p in "$@"; do t0=$(( t0 + $(cpu_ticks "$p") )); done
    if [[ $len == "$MIB" ]]; then
      out=$(wrk -t1 -c"$conns" -d"${DURATION}s" --timeout 30s -s "$WORK/range.lua" "$url" 2>&1)
    else
      out=$(wrk -t1 -c"$conns" -d"${DURATION}s" --timeout 30s "$url" 2>&1)
    fi
    t1=0; for p in "$@"; do t1=$(( t1 + $(cpu_ticks "$p") )); done
    printf '== %s\n%s\n' "$label" "$out" >>"$WORK/wrk.log"
    reqs=$(echo "$out" | awk '/requests in/ {print $1}')
    secs=$(echo "$out" | awk '/requests in/ {gsub("[s,]", "", $4); print $4}')
    errs=$(echo "$out" | awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {printf "%d", n}')
    echo "$(awk -v n="$reqs" -v l="$len" -v s="$secs" 'BEGIN { printf "%.0f", n * l / 1e6 / s }') $(s_per_gb $(( t1 - t0 )) $(( reqs * len ))) $reqs $errs"
  }
  serve_case() { # $1 = label, $2 = conns, $3 = bytes per answer
    local n nc m
    log "serving: $1"
    # shellcheck disable=SC2086
    n=($(serve_run "nginx $1" "http://127.0.0.1:$NG_PORT$object_path" "$2" "$3" $NG_WORKERS))
    # shellcheck disable=SC2086
    nc=($(serve_run "nginx (sendfile off) $1" "http://127.0.0.1:$NG_PORT_COPY$object_path" "$2" "$3" $NG_WORKERS))
    echo 5 >"/proc/$GW_PID/clear_refs"
    local rss
    rss=$(status_kb "$GW_PID" VmRSS)
    m=($(serve_run "mediagate $1" "http://$GW_ADDR$link_path" "$2" "$3" "$GW_PID"))
    SERVE_ROWS+=("| $1 | ${n[0]} | ${nc[0]} | ${m[0]} | $(ratio "${m[0]}" "${n[0]}") | $(ratio "${m[0]}" "${nc[0]}") | ${n[1]} / ${nc[1]} / ${m[1]} | $(mib $(( $(status_kb "$GW_PID" VmHWM) - rss ))) | ${n[2]} / ${nc[2]} / ${m[2]} | ${n[3]}/${nc[3]}/${m[3]} |")
  }
  serve_case "whole $SERVE_SIZE MiB, $WHOLE_CONNS connection(s)" "$WHOLE_CONNS" "$serve_bytes"
  serve_case "1 MiB ranges, $RANGE_CONNS connections" "$RANGE_CONNS" "$MIB"
fi

# --- report -------------------------------------------------------------------------
{
  echo "## Copy benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Machine: $(nproc) CPUs, $(cpu_model), $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r); $WORK on $(df --output=fstype "$WORK" | tail -1)."
  echo "Versions: mediagate $(git rev-parse --short HEAD 2>/dev/null || echo "?") ($MEDIAGATE), $(rustc --version), $(curl --version | head -1 | cut -d' ' -f1-2), nginx $("$NGINX" -v 2>&1 | cut -d/ -f2), wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}')${MOTO_VERSION:+, moto $MOTO_VERSION}."
  echo "Command: \`benches/copy.sh\` (SIZES=\"$SIZES\" S3_SIZES=\"$S3_SIZES\" REPEAT=$REPEAT SERVE_SIZE=$SERVE_SIZE DURATION=$DURATION WHOLE_CONNS=$WHOLE_CONNS RANGE_CONNS=$RANGE_CONNS)"
  echo
  if (( ${#FILE_ROWS[@]} > 0 )); then
  echo "### Copies into files (median of $REPEAT; MB = 10^6 bytes)"
  echo
  echo "Copy: from the completion recorded to the copy recorded \`stored\` (the ledger's times), through the gateway's guarded client, SHA-256 on the way, into \`[storage] url = \"file://…\"\`. curl: \`curl -o\` of the same URL from the same upstream into the same file system. MB/s: the median, then each run. RSS growth: VmHWM during a copy minus VmRSS before it, for the first copy of a fresh gateway (which includes what the gateway allocates once) / the largest of the other $(( REPEAT - 1 ))."
  echo
  echo "| size | copy s | copy MB/s | curl MB/s | copy/curl | gateway CPU s/GB | curl CPU s/GB | gateway RSS idle MiB | RSS growth MiB, first / others |"
  echo "|---|---:|---|---|---:|---:|---:|---:|---|"
  printf '%s\n' "${FILE_ROWS[@]}"
  echo
  fi
  if (( ${#S3_ROWS[@]} > 0 )); then
  echo "### Copies into S3: moto $MOTO_VERSION on loopback (median of $REPEAT)"
  echo
  echo "Multipart uploads of 5 MiB parts into moto, a Python server: the time and throughput are moto's, not the gateway's. Baseline: one \`curl -T\` PUT (SigV4) of the same bytes into moto. The gateway's CPU per GB and RSS growth are its own. MB/s and RSS growth as above."
  echo
  echo "| size | copy s | copy MB/s | moto single PUT MB/s | copy/PUT | gateway CPU s/GB | gateway RSS idle MiB | RSS growth MiB, first / others |"
  echo "|---|---:|---|---|---:|---:|---:|---|"
  printf '%s\n' "${S3_ROWS[@]}"
  echo
  fi
  [[ -z $S3_NOTE ]] || { echo "$S3_NOTE"; echo; }
  if (( ${#SERVE_ROWS[@]} > 0 )); then
  echo "### Serving the stored $SERVE_SIZE MiB result (wrk -t1, ${DURATION} s per run)"
  echo
  echo "mediagate: the task's signed link (\`…/content?expires=…&signature=…\`), answered from file storage. nginx: the same file from the same directory, sendfile on (as a file server is configured) and off. CPU: the gateway's, or nginx's workers' (user + system). RSS growth: the gateway's VmHWM during the run minus VmRSS before it."
  echo
  echo "| requests | nginx MB/s | nginx (sendfile off) MB/s | mediagate MB/s | mg/nginx | mg/nginx (sendfile off) | CPU s/GB nginx / off / mg | mediagate RSS growth MiB | requests n / off / mg | errors |"
  echo "|---|---:|---:|---:|---:|---:|---|---:|---|---|"
  printf '%s\n' "${SERVE_ROWS[@]}"
  echo
  fi
} | tee "$OUT/report.md"
cp "$WORK/wrk.log" "$OUT/" 2>/dev/null || true
