# Shell helpers shared by the benchmark scripts (load.sh, memory.sh, soak.sh), sourced
# after they cd to the repository root.

log() { printf '== %s\n' "$*" >&2; }

# Stop the processes the script started (the pids in its PIDS array).
stop_started() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; }

# Build the gateway, the fault upstream and the load generator in PROFILE (memory.sh,
# soak.sh); sets DIR (where they are), MEDIAGATE and LOADGEN.
build_fault_tools() {
  log "building ($PROFILE)"
  cargo build --quiet --profile "$PROFILE" --bin mediagate --example fault_upstream --example loadgen
  DIR=${CARGO_TARGET_DIR:-target}/$PROFILE
  MEDIAGATE=$DIR/mediagate
  LOADGEN=$DIR/examples/loadgen
}

# A TCP port nothing listens on now.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$(( 20000 + RANDOM % 20000 ))
    if ! ss -Htln "sport = :$p" | grep -q .; then echo "$p"; return; fi
  done
  echo "no free port" >&2; exit 1
}

# Wait (at most 30 s) until FILE contains PATTERN; print the first matching line.
wait_for() {
  local file=$1 pattern=$2
  for _ in $(seq 1 300); do
    if grep -q "$pattern" "$file" 2>/dev/null; then grep -m1 "$pattern" "$file"; return; fi
    sleep 0.1
  done
  echo "timed out waiting for '$pattern' in $file" >&2; cat "$file" >&2; exit 1
}

# A field of /proc/PID/status in kB: status_kb PID VmRSS.
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

# The CPU, as precisely as the machine says: a virtual machine often names only the
# vendor and line ("AMD EPYC"), so the family, model and stepping (which tell its
# generation apart) and the hypervisor are added when lscpu knows them.
cpu_model() {
  lscpu | awk -F': *' '
    $1 == "Model name" && name == "" { name = $2 }
    $1 == "CPU family" && fam == "" { fam = $2 }
    $1 == "Model" && model == "" { model = $2 }
    $1 == "Stepping" && step == "" { step = $2 }
    $1 == "Hypervisor vendor" { hv = $2 " guest" }
    END {
      id = fam != "" ? "family " fam ", model " model ", stepping " step : ""
      if (hv != "") id = id (id != "" ? "; " : "") hv
      printf "%s%s", name, id != "" ? " (" id ")" : ""
    }'
}

# The routes block of the provider `fast`: examples/fast_upstream.rs (the simulator's
# protocol) at $1; $2, lines added to its table (e.g. "poll_interval_ms = 5000").
fast_provider() {
  cat <<EOF
[providers.fast]
base_url = "$1"
connect_timeout_ms = 1000
submit_timeout_ms = 10000
query_timeout_ms = 5000
${2:-}

[providers.fast.submit]
path = '"/v2/model-center/tasks"'
query = '{kind: \$kind}'
body = '{model: \$upstream_model} + .'
id = '.id'
status = '.status'

[providers.fast.query]
path = '"/v2/model-center/tasks/\(\$id | @uri)"'
status = '.status'
status_map = { queued = "queued", processing = "processing", completed = "completed", failed = "failed" }
progress = '.progress'
urls = '.urls'
error_code = '.error.code'
error_message = '.error.message'
EOF
}

# A PostgreSQL cluster of its own (when the binaries are there): PG_BIN, PG_PORT,
# PG_DIR, as_pg (the command prefix that runs as the postgres user: PostgreSQL refuses
# to run as root) and PG_STOP (the command that stops it) set. Fails, with a log line
# saying why, when there is none or it did not start.
start_postgres() {
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [[ -n $PG_BIN ]] || { log "no PostgreSQL under /usr/lib/postgresql"; return 1; }
  # Outside a bench's work directory: the postgres user must be able to reach it.
  PG_DIR=$(mktemp -d /tmp/mediagate-bench-pg.XXXXXX)
  PG_PORT=$(free_port)
  as_pg=()
  if [[ $(id -u) == 0 ]]; then chown postgres "$PG_DIR"; as_pg=(runuser -u postgres --); fi
  "${as_pg[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" --auth=trust -U postgres >/dev/null
  PG_STOP=("${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast stop)
  # A cluster that does not start (its port taken meanwhile, say) costs a bench its
  # PostgreSQL figures only, not the run.
  "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w \
    -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1" start >/dev/null \
    || { log "PostgreSQL did not start ($(tail -1 "$PG_DIR/log" 2>/dev/null))"; rm -rf "$PG_DIR"; PG_STOP=(); return 1; }
}

# routes.toml text the benches' gateways share. Limits far above any bench's load.
unlimited() {
  cat <<'EOF'
[limits]
rate_per_second = 1000000
burst = 1000000
max_concurrent_requests = 100000
EOF
}

# The video schema, and the family "bench" of the models named (video, on the
# provider "fast").
bench_family() {
  local models
  models=$(printf '"%s", ' "$@")
  cat <<EOF
[schemas.video]
required = ["prompt"]
[schemas.video.properties]
prompt = { type = "string", minLength = 1, maxLength = 10000 }
duration = { type = "integer", minimum = 1 }

[families.bench]
kind = "video"
providers = ["fast"]
models = [${models%, }]
schema = "video"
default_seconds = 5
EOF
}

# The run's work directory ($WORK) removed at its end, unless KEEP_WORK=1.
remove_work() { if [[ ${KEEP_WORK:-} == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi; }

# sqlite3 (the benches read and write ledgers with it), installed with apt-get when
# missing.
need_sqlite3() {
  command -v sqlite3 >/dev/null && return
  log "installing sqlite3"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sqlite3 >/dev/null
}
