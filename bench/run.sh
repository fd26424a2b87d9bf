#!/usr/bin/env bash
# Measures Inlet against its yardsticks on this machine, side by side in one run (the
# targets of issue 12, group commit, and of issue 33, toward the physical limit), and ends
# with a table: each target, the figure, the ratio, ✓ or ✗. It starts with the machine's
# idle CPU over 3 s and says so when other work is running (then repeat the run). The
# ceilings and Inlet's c16 and c64 unique runs take ROUNDS rounds and report the median.
#
#   PostgreSQL (a scratch database at PG_ADMIN), a CHECKPOINT before every run:
#     1. the per-transaction ceiling: pgbench -M prepared, bench/ceiling.sql (the rows of
#        one accepted webhook per transaction), 16 clients; and the batched ceiling:
#        bench/ceiling-batched.sql, the same rows of 64 webhooks per transaction in one
#        multi-row statement per table, 4 clients
#     2. a Svix-shaped server's database work per message: pgbench, bench/svix.sql
#        (tables from bench/svix-schema.sql, in their own schema), 16 and 64 clients
#     3. Inlet, closed loop: concurrency 16 and 64 with unique events, 64 with 30 %
#        duplicates; then open loop at 1,000 requests/s
#     and the write-ahead log per transaction of 1, 2 and Inlet's unique c64 run:
#     pg_current_wal_lsn() before and after (the cluster's, so anything else writing to
#     this PostgreSQL meanwhile counts too) and, where the pg_walinspect extension is
#     available, the bytes of only this database's records and its transactions' commits
#     and, with MANY (default on), Inlet at 256 and 1,024 keep-alive connections, then
#     IDLE_CONNECTIONS idle ones (bench/flood.py … idle: its RSS) and a c64 run after them
#   SQLite (a scratch file):
#     4. the ceiling: `inlet bench --ceiling`, one connection, synchronous = "normal"; the
#        batched ceiling: `--ceiling --batch 64` with synchronous = "full"
#     5. Inlet with synchronous = "full": concurrency 16 and 64 unique, 64 with 30 %
#        duplicates, open loop at 1,000 requests/s
#   End to end (E2E_BACKENDS, a fresh database each, dispatcher on, delivering to
#   `inlet bench --sink`, which answers 200 after SINK_DELAY):
#     6. unique events at concurrency 64 for E2E_DURATION, the backlog (pending and
#        in-progress deliveries) every 5 s, then delivered/s against accepted/s and how
#        long the rest takes to drain (at most DRAIN_TIMEOUT)
#   Onto the bus (BUS_KINDS x BUS_BACKENDS, a fresh database each, dispatcher on,
#   publishing to NATS JetStream at NATS_ADDRESS, into a stream of the run's own, and to
#   RabbitMQ at AMQP_ADDRESS as guest/guest, through amq.topic into a queue of the run's
#   own, bound for the routing keys the run publishes):
#     7. unique events at concurrency 64 for BUS_DURATION, then until every fact is
#        published and confirmed: published facts/s end to end (load start to last ack or
#        confirm), and the stream's or queue's message count against the facts published
#
# Ingestion runs (3, 5) have a destination configured, so every accepted webhook writes its
# delivery row as in the ceiling, and the dispatcher and sweeper off.
#
# Takes about 6 minutes with the defaults when the backlogs drain at once (the RabbitMQ bus
# runs add about one), up to 10 when they do not (each drain waits at most DRAIN_TIMEOUT),
# plus the release build. Settings (environment):
#   DURATION=10s          each measured run (whole seconds)
#   ROUNDS=3              rounds of the ceilings and of Inlet's c16/c64 unique runs (median)
#   MANY=1                the many-connections runs ("" for none); IDLE_CONNECTIONS=10000
#   E2E_DURATION=60s      each end-to-end run; E2E_BACKENDS="postgres sqlite" (or "" for none)
#   DRAIN_TIMEOUT=120     seconds to wait for the backlog to drain after an end-to-end run
#   SINK_DELAY=5ms        the sink's answer delay
#   MEMORY_REQUESTS=N     adds a resident-memory run of N requests (e.g. 1000000)
#   PG_ADMIN=postgres://postgres@127.0.0.1:5432/postgres
#   PG_SETTINGS, SQLITE_SETTINGS   extra lines for [database] (PG_SETTINGS defaults to
#                         "pool_size = 32"), e.g. PG_SETTINGS=$'pool_size = 32\nwriters = 3'
#   BUS_DURATION=20s      each bus run; BUS_BACKENDS="postgres sqlite" (or "" for none)
#   BUS_KINDS="nats amqp" the brokers of the bus runs (or "" for none)
#   NATS_ADDRESS=127.0.0.1:4222   NATS with JetStream
#   AMQP_ADDRESS=127.0.0.1:5672   RabbitMQ, user guest/guest, vhost /
#   ONLY_BUS=1            only the bus runs (7): no ingestion (1-5) or end-to-end (6) runs
#   PORT_BASE=18080       Inlet listens on PORT_BASE..PORT_BASE+5, the sink on PORT_BASE+10
#   PROFILES="release"    with more (PROFILES="release dist"), each profile is built too and
#                         8. its server binary's size, and Inlet c64 unique on PostgreSQL
#                         and on SQLite FULL served by it (the same load generator, a fresh
#                         database each), in two rounds taking turns, after the runs above
#   FILTERS=1             9. jq filters and transforms (bench/filters.sh, on PostgreSQL
#                         and SQLite): ingest with one and with five filtered destinations
#                         against as many plain ones and the database ceiling, and the
#                         drain rate with a transform against without ("" for none)
#   CONSOLE=1             10. the console's search (bench/console.sh, on PostgreSQL and
#                         SQLite): the ceiling with and without the type filter's index
#                         `events (event_type, id)`, and the events page's time unfiltered,
#                         by type, by event id and by a payload value ("" for none)
#   TRACES=1              11. OpenTelemetry tracing (bench/traces.sh, on PostgreSQL and
#                         SQLite): ingest and drain with tracing off against every trace
#                         recorded and exported over OTLP/HTTP ("" for none)
set -euo pipefail
cd "$(dirname "$0")/.."
# The load generator opens up to 1,024 connections, the idle run 10,000: the hard limit.
ulimit -n "$(ulimit -Hn)"

DURATION=${DURATION:-10s}
E2E_DURATION=${E2E_DURATION:-60s}
E2E_BACKENDS=${E2E_BACKENDS-postgres sqlite}
BUS_DURATION=${BUS_DURATION:-20s}
BUS_BACKENDS=${BUS_BACKENDS-postgres sqlite}
BUS_KINDS=${BUS_KINDS-nats amqp}
NATS_ADDRESS=${NATS_ADDRESS:-127.0.0.1:4222}
AMQP_ADDRESS=${AMQP_ADDRESS:-127.0.0.1:5672}
ONLY_BUS=${ONLY_BUS:-}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-120}
SINK_DELAY=${SINK_DELAY:-5ms}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
PG_SETTINGS=${PG_SETTINGS-pool_size = 32}
SQLITE_SETTINGS=${SQLITE_SETTINGS-}
PORT_BASE=${PORT_BASE:-18080}
ROUNDS=${ROUNDS:-3}
MANY=${MANY-1}
IDLE_CONNECTIONS=${IDLE_CONNECTIONS:-10000}
PROFILES=${PROFILES:-release}
FILTERS=${FILTERS-1}
CONSOLE=${CONSOLE-1}
TRACES=${TRACES-1}
SECRET=whsec_bench_secret_for_local_runs_0123456789

for d in "$DURATION" "$E2E_DURATION" "$BUS_DURATION"; do
  [[ $d =~ ^[0-9]+s$ ]] || { echo "durations are whole seconds, like 10s (got $d)"; exit 2; }
done
seconds=${DURATION%s}

work=$(mktemp -d)
results="$work/results"
mkdir -p "$results"
db="inlet_bench_$$"
pg_url="${PG_ADMIN%/*}/$db"
server=""
sink=""
load=""

cleanup() {
  for pid in "$load" "$server" "$sink"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  [ -n "${stream:-}" ] && python3 bench/nats.py delete "$NATS_ADDRESS" "$stream" 2>/dev/null
  [ -n "${queue:-}" ] && python3 bench/amqp.py delete "$AMQP_ADDRESS" "$queue" 2>/dev/null
  for name in "$db" "${db}_e2e" "${db}_bus_nats" "${db}_bus_amqp" "${db}_profile"; do
    psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $name WITH (FORCE)" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# release always: the load generator and the runs above it are the release binary's.
for profile in $(printf '%s\n' release $PROFILES | awk '!seen[$0]++'); do
  echo "== building ($profile)"
  cargo build --profile "$profile" --quiet --bin inlet
done
bin=${CARGO_TARGET_DIR:-target}/release/inlet
# The binary `serve` starts (the profile runs change it; the load generator stays $bin).
server_bin=$bin

report() { python3 bench/report.py "$@"; }
json() { "$bin" bench --json "$@"; }

# A configuration: config NAME URL PORT DATABASE_LINES [DESTINATION_URL [DESTINATION_LINES]].
# One stripe source with one destination (so every accepted webhook writes its delivery
# row, as in the ceiling); with a DESTINATION_URL the dispatcher delivers to it, without
# one the dispatcher is off and the destination a closed port. The sweeper is always off.
config() {
  local destination=${5:-http://127.0.0.1:9/events} enabled=false
  [ -n "${5:-}" ] && enabled=true
  # The ceiling's pgbench rows are under the source "bench", which Inlet does not serve.
  cat > "$work/$1.toml" <<TOML
retired_sources = ["bench"]
[server]
bind = "127.0.0.1:$3"
[database]
url = "$2"
$4
[delivery]
enabled = $enabled
[retention]
sweeper = false
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["$SECRET"]
[[sources.destinations]]
url = "$destination"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
name = "app"
${6:-}
TOML
  echo "$work/$1.toml"
}

# port_free PORT: fails, saying so, when something already answers there (another run?).
port_free() {
  if curl -s -o /dev/null "http://127.0.0.1:$1/"; then
    echo "port $1 is in use: set PORT_BASE to run beside it"; exit 1
  fi
}

# serve CONFIG PORT: starts Inlet and waits until it is ready.
serve() {
  port_free "$2"
  INLET_LOG=warn "$server_bin" serve --config "$1" > "$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$2/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  echo "inlet did not become ready on port $2"; cat "$work/serve.log"; exit 1
}

stop() { kill "$server"; wait "$server" 2>/dev/null || true; server=""; }

checkpoint() { psql "$pg_url" -qc CHECKPOINT; sleep 2; }
lsn() { psql "$pg_url" -tAc 'SELECT pg_current_wal_lsn()'; }
# wal_since LSN: "CLUSTER_BYTES DATABASE_BYTES" written since LSN. The second is the size
# of the records that touch this database's relations and of its transactions' commit
# records (pg_walinspect, which reads only up to the flushed LSN), so other databases'
# work on a shared server is left out; "null" without the extension or when it fails.
wal_since() {
  local cluster mine=""
  cluster=$(psql "$pg_url" -tAc "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$1')::bigint")
  if [ "$walinspect" = yes ]; then
    mine=$(psql "$pg_url" -tA 2>"$work/walinspect.err" -c "
      WITH r AS (SELECT xid, record_length, resource_manager, block_ref
                 FROM pg_get_wal_records_info('$1', pg_current_wal_flush_lsn())),
           db AS (SELECT '%/' || oid || '/%' AS pattern FROM pg_database
                  WHERE datname = current_database()),
           mine AS (SELECT DISTINCT xid FROM r, db WHERE block_ref LIKE db.pattern AND xid <> '0')
      SELECT sum(record_length) FILTER (WHERE block_ref LIKE db.pattern
               OR (resource_manager = 'Transaction' AND xid IN (SELECT xid FROM mine)))
      FROM r, db") || { echo "  (this database's WAL not measured: $(head -1 "$work/walinspect.err"))" >&2; mine=""; }
  fi
  echo "$cluster ${mine:-null}"
}

# pgbench_run NAME LABEL SCRIPT CLIENTS [PER_TX]: after a checkpoint, with the WAL it
# writes; PER_TX webhooks per transaction (default 1). Prepared statements: the best case.
pgbench_run() {
  local name=$1 label=$2 script=$3 clients=$4 per_tx=${5:-1} before cluster mine
  checkpoint
  before=$(lsn)
  if ! pgbench -n -M prepared -f "$script" -c "$clients" -j 2 -T "$seconds" -l \
      --log-prefix "$work/pgbench_$name" "$pg_url" > "$work/pgbench_$name.out" 2>&1; then
    echo "pgbench $script failed:"; cat "$work/pgbench_$name.out"; exit 1
  fi
  read -r cluster mine < <(wal_since "$before")
  report pgbench "$work/pgbench_$name.out" "$work/pgbench_$name" "$cluster" "$mine" "$per_tx" \
    > "$results/$name.json"
  rm -f "$work/pgbench_$name".*
  report line "$label" "$results/$name.json"
}

# inlet_run NAME LABEL wal|- BENCH_ARGS...: one `inlet bench` run, with the WAL it wrote
# when the third argument is "wal" (PostgreSQL only).
inlet_run() {
  local name=$1 label=$2 wal=$3 before="" cluster mine
  shift 3
  [ "$wal" = wal ] && before=$(lsn)
  json "$@" > "$results/$name.json"
  if [ -n "$before" ]; then
    read -r cluster mine < <(wal_since "$before")
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["wal_bytes"]=int(sys.argv[2]); r["wal_bytes_db"]=json.loads(sys.argv[3]); json.dump(r,open(sys.argv[1],"w"))' \
      "$results/$name.json" "$cluster" "$mine"
  fi
  report line "$label" "$results/$name.json"
}

# pg_inlet_run: inlet_run after a checkpoint.
pg_inlet_run() { checkpoint; inlet_run "$@"; }

# rounds NAME RUNNER LABEL ARGS...: ROUNDS rounds of one run (RUNNER is pgbench_run or
# inlet_run, called with NAME_rN and LABEL), then the median round as NAME.
rounds() {
  local name=$1 runner=$2 label=$3 r
  shift 3
  for r in $(seq 1 "$ROUNDS"); do
    "$runner" "${name}_r$r" "$label (round $r)" "$@"
  done
  report median "$results" "$name"
}

# The machine's idle CPU over 3 s, in percent: a figure below 90 says other work ran.
idle_cpu() {
  local a b
  read -r -a a < <(head -n 1 /proc/stat)
  sleep 3
  read -r -a b < <(head -n 1 /proc/stat)
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  echo $(( (100 * (b[4] - a[4] + b[5] - a[5])) / (total > 0 ? total : 1) ))
}

idle=$(idle_cpu)
echo "== idle CPU before the run: ${idle} %"
if [ "$idle" -lt 90 ]; then
  echo "   other work is running on this machine: these figures are not quiet ones; repeat the run"
fi
echo "== machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, PostgreSQL $(psql "$PG_ADMIN" -tAc 'SHOW server_version')"
if [ -n "$ONLY_BUS" ]; then
  E2E_BACKENDS=""
  echo "== only the bus runs: ${BUS_DURATION} each, ${BUS_KINDS:-no broker} on ${BUS_BACKENDS:-no backend}"
else
  echo "== each run ${DURATION}; end to end ${E2E_DURATION} on: ${E2E_BACKENDS:-none}; bus ${BUS_DURATION}: ${BUS_KINDS:-none} on ${BUS_BACKENDS:-none}"
fi

if [ -z "$ONLY_BUS" ]; then
  echo "== PostgreSQL"
  psql "$PG_ADMIN" -qc "CREATE DATABASE $db"
  pg=$(config pg "$pg_url" "$PORT_BASE" "$PG_SETTINGS")
  "$bin" migrate --config "$pg" >/dev/null
  psql "$pg_url" -v ON_ERROR_STOP=1 -qf bench/svix-schema.sql
  walinspect=no
  psql "$pg_url" -qc "CREATE EXTENSION IF NOT EXISTS pg_walinspect" >/dev/null 2>&1 && walinspect=yes
  rounds pg_ceiling pgbench_run "ceiling: pgbench ceiling.sql, 16 clients" bench/ceiling.sql 16
  rounds pg_batched pgbench_run "batched ceiling: ceiling-batched.sql, 4 clients" \
    bench/ceiling-batched.sql 4 64
  pgbench_run svix16 "Svix-shaped: pgbench svix.sql, 16 clients" bench/svix.sql 16
  pgbench_run svix64 "Svix-shaped: pgbench svix.sql, 64 clients" bench/svix.sql 64

  serve "$pg" "$PORT_BASE"
  rounds pg_c16 pg_inlet_run "inlet PostgreSQL, c16, unique" - --config "$pg" --concurrency 16 --duration "$DURATION"
  rounds pg_c64 pg_inlet_run "inlet PostgreSQL, c64, unique" wal --config "$pg" --concurrency 64 --duration "$DURATION"
  checkpoint
  inlet_run pg_c64_dups "inlet PostgreSQL, c64, 30% duplicates" - --config "$pg" --concurrency 64 --duration "$DURATION" --duplicates 0.3
  checkpoint
  inlet_run pg_open "inlet PostgreSQL, open loop 1000/s" - --config "$pg" --rate 1000 --duration "$DURATION"
  if [ -n "$MANY" ]; then
    echo "== many connections (keep-alive; then $IDLE_CONNECTIONS idle ones)"
    pg_inlet_run pg_c256 "inlet PostgreSQL, c256, unique" - --config "$pg" --concurrency 256 --duration "$DURATION"
    pg_inlet_run pg_c1024 "inlet PostgreSQL, c1024, unique" - --config "$pg" --concurrency 1024 --duration "$DURATION"
    python3 bench/flood.py "$server" "$PORT_BASE" 1 "$IDLE_CONNECTIONS" idle | tee "$work/idle.txt"
    python3 -c 'import json,re,sys; t=open(sys.argv[1]).read(); m=re.search(r"\((\d+)/(\d+) connected, peak (\d+) MB while held, up to (\d+) waiting to be accepted, (\d+) answered", t); b=re.search(r"rss before: (\d+)", t); json.dump({"opened": int(m[1]), "asked": int(m[2]), "peak_mb": int(m[3]), "queued": int(m[4]), "answered": int(m[5]), "before_mb": int(b[1])}, open(sys.argv[2], "w"))' \
      "$work/idle.txt" "$results/idle.json"
    inlet_run pg_after_idle "inlet PostgreSQL, c64 after the idle ones" - --config "$pg" --concurrency 64 --duration "$DURATION"
  fi
  if [ -n "${MEMORY_REQUESTS:-}" ]; then
    echo "== resident memory over ${MEMORY_REQUESTS} requests (c16, 30% duplicates)"
    rss() { awk '/VmRSS/{print $2}' "/proc/$server/status"; }
    first_kb=$(rss)
    echo "at start: RSS $first_kb kB"
    done_requests=0
    while [ "$done_requests" -lt "$MEMORY_REQUESTS" ]; do
      round=$(json --config "$pg" --concurrency 16 --duration 30s --duplicates 0.3)
      done_requests=$((done_requests + $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["requests"])' "$round")))
      echo "after $done_requests requests: RSS $(rss) kB"
    done
    echo "{\"first_kb\": $first_kb, \"last_kb\": $(rss), \"requests\": $done_requests}" > "$results/memory.json"
  fi
  stop

  echo "== SQLite"
  # PostgreSQL's own checkpoint of the runs above writes to the same disk: let it finish, so
  # that SQLite's fsyncs do not queue behind it.
  checkpoint
  sqlite_file="$work/bench.db"
  sqlite_normal=$(config sqlite-normal "sqlite://$sqlite_file" $((PORT_BASE + 1)) $'synchronous = "normal"\n'"$SQLITE_SETTINGS")
  sqlite=$(config sqlite "sqlite://$sqlite_file" $((PORT_BASE + 1)) $'synchronous = "full"\n'"$SQLITE_SETTINGS")
  "$bin" migrate --config "$sqlite" >/dev/null
  inlet_run sq_ceiling "ceiling: SQLite NORMAL, one connection" - --config "$sqlite_normal" --ceiling --concurrency 1 --duration "$DURATION"
  rounds sq_batched inlet_run "batched ceiling: SQLite FULL, 64 per tx" - --config "$sqlite" --ceiling --batch 64 --concurrency 1 --duration "$DURATION"
  serve "$sqlite" $((PORT_BASE + 1))
  inlet_run sq_c16 "inlet SQLite FULL, c16, unique" - --config "$sqlite" --concurrency 16 --duration "$DURATION"
  rounds sq_c64 inlet_run "inlet SQLite FULL, c64, unique" - --config "$sqlite" --concurrency 64 --duration "$DURATION"
  inlet_run sq_c64_dups "inlet SQLite FULL, c64, 30% duplicates" - --config "$sqlite" --concurrency 64 --duration "$DURATION" --duplicates 0.3
  inlet_run sq_open "inlet SQLite FULL, open loop 1000/s" - --config "$sqlite" --rate 1000 --duration "$DURATION"
  stop
fi

# profile_run PROFILE ROUND: its server, c64 unique on PostgreSQL and on SQLite FULL, each
# on a fresh database.
profile_run() {
  local name="profile_${1}_$2" size
  server_bin=${CARGO_TARGET_DIR:-target}/$1/inlet
  size=$(stat -c %s "$server_bin")
  echo "$1: binary $((size / 1000)) kB"
  psql "$PG_ADMIN" -qc "CREATE DATABASE ${db}_profile"
  local cfg
  cfg=$(config profile-pg "${PG_ADMIN%/*}/${db}_profile" "$PORT_BASE" "$PG_SETTINGS")
  "$server_bin" migrate --config "$cfg" >/dev/null
  serve "$cfg" "$PORT_BASE"
  checkpoint
  inlet_run "${name}_pg" "$1 (round $2): PostgreSQL, c64, unique" - --config "$cfg" --concurrency 64 --duration "$DURATION"
  stop
  psql "$PG_ADMIN" -qc "DROP DATABASE ${db}_profile WITH (FORCE)"
  rm -f "$work"/profile.db*
  cfg=$(config profile-sq "sqlite://$work/profile.db" $((PORT_BASE + 1)) $'synchronous = "full"\n'"$SQLITE_SETTINGS")
  "$server_bin" migrate --config "$cfg" >/dev/null
  serve "$cfg" $((PORT_BASE + 1))
  inlet_run "${name}_sq" "$1 (round $2): SQLite FULL, c64, unique" - --config "$cfg" --concurrency 64 --duration "$DURATION"
  stop
  server_bin=$bin
}

if [ -z "$ONLY_BUS" ] && [ "$(wc -w <<<"$PROFILES")" -gt 1 ]; then
  echo "== profiles: $PROFILES, two rounds taking turns"
  for round in 1 2; do
    for profile in $PROFILES; do profile_run "$profile" "$round"; done
  done
fi

# backlog BACKEND URL: "backlog delivered enqueued" of a run's database.
backlog() {
  local query="SELECT coalesce(sum(CASE WHEN status IN ('pending', 'in_progress') THEN 1 ELSE 0 END), 0),
                      coalesce(sum(CASE WHEN status = 'delivered' THEN 1 ELSE 0 END), 0), count(*)
               FROM deliveries"
  case $1 in
    postgres) psql "$2" -tA -F ' ' -c "$query" ;;
    sqlite) sqlite3 -separator ' ' "${2#sqlite://}" "$query" ;;
  esac
}
# scratch BACKEND NAME PORT: a fresh database ${db}_NAME (PostgreSQL) or NAME.db (SQLite)
# for one run; sets the caller's label, url, settings and port (PORT, or PORT + 1 for
# SQLite).
scratch() {
  case $1 in
    postgres)
      psql "$PG_ADMIN" -qc "CREATE DATABASE ${db}_$2"
      label=PostgreSQL url="${PG_ADMIN%/*}/${db}_$2" settings=$PG_SETTINGS port=$3 ;;
    sqlite)
      label=SQLite url="sqlite://$work/$2.db" port=$(($3 + 1))
      settings=$'synchronous = "full"\n'"$SQLITE_SETTINGS" ;;
    *) echo "unknown backend $1 (E2E_BACKENDS, BUS_BACKENDS: postgres, sqlite)"; exit 2 ;;
  esac
}

# Whole seconds since $started.
elapsed() { python3 -c "import sys,time; print(int(time.time() - float(sys.argv[1])))" "$started"; }
sink_count() { curl -sf "http://127.0.0.1:$sink_port/count" || echo 0; }

# e2e BACKEND: ingestion and delivery together, unique events at concurrency 64.
e2e() {
  local backend=$1 url settings port cfg started next=5 b d e enqueued_end delivered_end \
    backlog_end backlog_max=0 drain=null left sink_start sink_end label
  scratch "$backend" e2e $((PORT_BASE + 2))
  echo "== end to end on $label: c64 unique for ${E2E_DURATION}, dispatcher on, sink ${SINK_DELAY}"
  cfg=$(config "e2e-$backend" "$url" "$port" "$settings" "http://127.0.0.1:$sink_port/webhooks")
  "$bin" migrate --config "$cfg" >/dev/null
  serve "$cfg" "$port"
  sink_start=$(sink_count)
  json --config "$cfg" --concurrency 64 --duration "$E2E_DURATION" > "$results/e2e_${backend}_load.json" &
  load=$!
  started=$(date +%s.%N)
  while kill -0 "$load" 2>/dev/null; do
    sleep 0.5
    if [ "$(elapsed)" -ge "$next" ] && kill -0 "$load" 2>/dev/null; then
      read -r b d e < <(backlog "$backend" "$url")
      [ "$b" -gt "$backlog_max" ] && backlog_max=$b
      printf '  t=%3ss  backlog %7s  delivered %7s  enqueued %7s  sink %7s\n' "$next" "$b" "$d" "$e" "$(sink_count)"
      next=$((next + 5))
    fi
  done
  wait "$load"
  load=""
  read -r backlog_end delivered_end e < <(backlog "$backend" "$url")
  sink_end=$(sink_count)
  [ "$backlog_end" -gt "$backlog_max" ] && backlog_max=$backlog_end
  enqueued_end=$e
  printf '  end    backlog %7s  delivered %7s  enqueued %7s  sink %7s\n' "$backlog_end" "$delivered_end" "$e" "$sink_end"
  report line "inlet $label, c64 unique, delivering" "$results/e2e_${backend}_load.json"
  started=$(date +%s.%N)
  left=$backlog_end
  while [ "$left" -gt 0 ] && [ "$(elapsed)" -lt "$DRAIN_TIMEOUT" ]; do
    sleep 1
    read -r left d e < <(backlog "$backend" "$url")
  done
  if [ "$left" -eq 0 ]; then
    drain=$(python3 -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 1))" "$started")
    echo "  drained in ${drain} s"
  else
    echo "  not drained after ${DRAIN_TIMEOUT} s: backlog $left"
  fi
  stop
  python3 - "$results/e2e_${backend}_load.json" "$results/e2e_${backend}.json" \
    "$delivered_end" "$backlog_end" "$backlog_max" "$drain" "$DRAIN_TIMEOUT" "$left" "$enqueued_end" "$sink_start" "$sink_end" <<'PY'
import json, sys
load = json.load(open(sys.argv[1]))
delivered, backlog_end, backlog_max = (int(a) for a in sys.argv[3:6])
result = {
    "accepted_per_sec": load["accepted_per_sec"],
    "delivered_per_sec": delivered / load["seconds"],
    "delivered_at_end": delivered,
    "enqueued_at_end": int(sys.argv[9]),
    "backlog_at_end": backlog_end,
    "backlog_max": backlog_max,
    "drain_seconds": json.loads(sys.argv[6]),
    "drain_timeout": int(sys.argv[7]),
    "backlog_after_drain": int(sys.argv[8]),
    # Requests the sink received during the load: sent, not necessarily settled yet.
    "sink_per_sec": (int(sys.argv[11]) - int(sys.argv[10])) / load["seconds"],
    "load": load,
}
json.dump(result, open(sys.argv[2], "w"))
print(f"  during the load: delivered {result['delivered_per_sec']:.0f}/s (settled; the sink "
      f"received {result['sink_per_sec']:.0f}/s), accepted {result['accepted_per_sec']:.0f}/s: "
      f"{result['delivered_per_sec'] / max(result['accepted_per_sec'], 1e-9):.2f}×")
PY
  [ "$backend" = postgres ] && psql "$PG_ADMIN" -qc "DROP DATABASE ${db}_e2e WITH (FORCE)"
  return 0
}

if [ -n "$E2E_BACKENDS" ]; then
  sink_port=$((PORT_BASE + 10))
  port_free "$sink_port"
  INLET_LOG=warn "$bin" bench --config "$pg" --sink "127.0.0.1:$sink_port" --sink-delay "$SINK_DELAY" > "$work/sink.log" 2>&1 &
  sink=$!
  for _ in $(seq 1 50); do
    curl -sf "http://127.0.0.1:$sink_port/count" >/dev/null 2>&1 && break
    sleep 0.1
  done
  kill -0 "$sink" 2>/dev/null || { echo "the sink did not start"; cat "$work/sink.log"; exit 1; }
  for backend in $E2E_BACKENDS; do
    e2e "$backend"
  done
  kill "$sink"; wait "$sink" 2>/dev/null || true; sink=""
  echo "  $(tail -1 "$work/sink.log")"
fi

# bus KIND BACKEND: ingestion and publishing to the broker together (KIND nats: JetStream,
# into a stream of the run's own; amqp: RabbitMQ, through amq.topic into a durable queue of
# the run's own), unique events at c64, then until the outbox is empty; published facts/s
# from the load's start to the last ack or confirm.
bus() {
  local kind=$1 backend=$2 url settings port cfg started left=1 published stored label \
    name broker destination
  scratch "$backend" "bus_$kind" $((PORT_BASE + 4))
  name="inlet_bench_bus_$$_${kind}_$backend"
  case $kind in
    nats)
      stream=$name
      python3 bench/nats.py create "$NATS_ADDRESS" "$stream"
      broker="JetStream (stream $stream)"
      destination=("nats://$NATS_ADDRESS" "subject = \"$stream.{source}.{event_type}\"") ;;
    amqp)
      queue=$name
      python3 bench/amqp.py create "$AMQP_ADDRESS" "$queue"
      broker="RabbitMQ (amq.topic, queue $queue)"
      # A routing key of the run's own (the queue is bound to "$queue.#"), so nothing else
      # publishing on the shared broker lands in the queue.
      destination=("amqp://guest:guest@$AMQP_ADDRESS/%2f" "routing_key = \"$queue.{source}.{event_type}\"") ;;
    *) echo "unknown broker $kind (BUS_KINDS: nats, amqp)"; exit 2 ;;
  esac
  echo "== onto the bus on $label: c64 unique for ${BUS_DURATION}, publishing to $broker"
  cfg=$(config "bus-$kind-$backend" "$url" "$port" "$settings" "${destination[@]}")
  "$bin" migrate --config "$cfg" >/dev/null
  serve "$cfg" "$port"
  started=$(date +%s.%N)
  json --config "$cfg" --concurrency 64 --duration "$BUS_DURATION" > "$results/bus_${kind}_${backend}_load.json"
  while [ "$left" -gt 0 ] && [ "$(elapsed)" -lt "$((${BUS_DURATION%s} + DRAIN_TIMEOUT))" ]; do
    read -r left published _ < <(backlog "$backend" "$url")
    [ "$left" -gt 0 ] && sleep 0.2
  done
  local took
  took=$(python3 -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 1))" "$started")
  stop
  case $kind in
    nats)
      stored=$(python3 bench/nats.py count "$NATS_ADDRESS" "$stream")
      python3 bench/nats.py delete "$NATS_ADDRESS" "$stream"; stream="" ;;
    amqp)
      stored=$(python3 bench/amqp.py count "$AMQP_ADDRESS" "$queue")
      python3 bench/amqp.py delete "$AMQP_ADDRESS" "$queue"; queue="" ;;
  esac
  report bus "$kind" "$results/bus_${kind}_${backend}_load.json" "$results/bus_${kind}_${backend}.json" \
    "$published" "$left" "$took" "$stored"
  [ "$backend" = postgres ] && psql "$PG_ADMIN" -qc "DROP DATABASE ${db}_bus_$kind WITH (FORCE)"
  return 0
}

for kind in $BUS_KINDS; do
  for backend in $BUS_BACKENDS; do
    bus "$kind" "$backend"
  done
done

if [ -z "$ONLY_BUS" ] && [ -n "$FILTERS" ]; then
  echo "== filters and transforms (bench/filters.sh)"
  BIN="$bin" DURATION="$DURATION" PORT_BASE=$((PORT_BASE + 200)) PG_ADMIN="$PG_ADMIN" bench/filters.sh
fi

if [ -z "$ONLY_BUS" ] && [ -n "$CONSOLE" ]; then
  echo "== the console's search (bench/console.sh)"
  BIN="$bin" DURATION="$DURATION" PORT_BASE=$((PORT_BASE + 300)) PG_ADMIN="$PG_ADMIN" bench/console.sh
fi

if [ -z "$ONLY_BUS" ] && [ -n "$TRACES" ]; then
  echo "== OpenTelemetry tracing (bench/traces.sh)"
  BIN="$bin" DURATION="$DURATION" PORT_BASE=$((PORT_BASE + 400)) PG_ADMIN="$PG_ADMIN" bench/traces.sh
fi

echo "== summary (took $((SECONDS / 60)) min $((SECONDS % 60)) s)"
report summary "$results" ${ONLY_BUS:+bus}
