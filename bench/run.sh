#!/usr/bin/env bash
# Measures Inlet against the database ceiling on this machine, in one go:
#   1. PostgreSQL ceiling (pgbench, bench/ceiling.sql) at concurrency 16
#   2. Inlet on PostgreSQL, concurrency 16: unique events, then 30 % duplicates
#   3. SQLite ceiling (inlet bench --ceiling: the same statements on one connection,
#      Inlet's pragmas), then Inlet on SQLite: unique, then 30 % duplicates
#   4. Inlet on PostgreSQL open loop at 1,000 requests/s
# and prints each figure and the ratios Inlet/ceiling. DURATION (default 10s) sets each
# run's length; MEMORY_REQUESTS=1000000 adds a resident-memory run of that many requests.
# Needs PostgreSQL at PG_ADMIN (default postgres://postgres@127.0.0.1:5432/postgres).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
SECRET=whsec_bench_secret_for_local_runs
work=$(mktemp -d)
db="inlet_bench_$$"
server=""

cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building (release)"
cargo build --release --quiet
bin=target/release/inlet

psql "$PG_ADMIN" -qc "CREATE DATABASE $db"
pg_url="${PG_ADMIN%/*}/$db"

# A configuration for a database: one stripe source with one destination (so every
# accepted webhook writes its delivery row, as in the ceiling); dispatcher and sweeper
# off, so only ingestion is measured.
config() {
  cat > "$work/$1.toml" <<TOML
[server]
bind = "127.0.0.1:$3"
[database]
url = "$2"
$4
[delivery]
enabled = false
[retention]
sweeper = false
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["$SECRET"]
[[sources.destinations]]
url = "http://127.0.0.1:9/events"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
name = "app"
TOML
  echo "$work/$1.toml"
}

serve() {
  INLET_LOG=warn "$bin" serve --config "$1" > "$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$2/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "inlet did not become ready"; cat "$work/serve.log"; exit 1
}

stop() { kill "$server"; wait "$server" 2>/dev/null || true; server=""; }

json() { "$bin" bench --json "$@"; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }
show() { python3 -c "
import json,sys
r=json.loads(sys.argv[2]); l=r['latency_ms']
print(f\"{sys.argv[1]:<44} {r['requests_per_sec']:>8.0f} req/s {r['accepted_per_sec']:>8.0f} accepted/s   p50 {l['p50']:.2f}  p99 {l['p99']:.2f}  p99.9 {l['p999']:.2f}  max {l['max']:.2f} ms   {r['statuses']}\")" "$1" "$2"; }

echo "== machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(psql "$PG_ADMIN" -tAc 'SHOW server_version') PostgreSQL"
pg=$(config pg "$pg_url" 18080 "pool_size = 32")
"$bin" migrate --config "$pg" >/dev/null
seconds=${DURATION%s}

echo "== PostgreSQL ceiling (pgbench, 16 clients, ${DURATION})"
pg_tps=$(pgbench -n -f bench/ceiling.sql -c 16 -j 2 -T "$seconds" "$pg_url" 2>/dev/null | awk '/^tps/{print $3; exit}')
printf '%-44s %8.0f tx/s\n' "ceiling: pgbench" "$pg_tps"
rust_ceiling=$(json --config "$pg" --ceiling --concurrency 16 --duration "$DURATION")
show "ceiling: inlet bench --ceiling (16 conns)" "$rust_ceiling"

serve "$pg" 18080
unique=$(json --config "$pg" --concurrency 16 --duration "$DURATION")
show "inlet PostgreSQL, c16, unique" "$unique"
dups=$(json --config "$pg" --concurrency 16 --duration "$DURATION" --duplicates 0.3)
show "inlet PostgreSQL, c16, 30% duplicates" "$dups"
# Let PostgreSQL finish the checkpoint the closed-loop runs started before the latency run.
psql "$pg_url" -qc CHECKPOINT
sleep 5
rate=$(json --config "$pg" --rate 1000 --duration "$DURATION")
show "inlet PostgreSQL, open loop 1000/s" "$rate"
if [ -n "${MEMORY_REQUESTS:-}" ]; then
  echo "== resident memory over ${MEMORY_REQUESTS} requests"
  done_requests=0
  while [ "$done_requests" -lt "$MEMORY_REQUESTS" ]; do
    round=$(json --config "$pg" --concurrency 16 --duration 30s --duplicates 0.3)
    done_requests=$((done_requests + $(field "$round" "['requests']")))
    echo "after $done_requests requests: RSS $(awk '/VmRSS/{print $2, $3}' /proc/$server/status)"
  done
fi
stop

sqlite=$(config sqlite "sqlite://$work/bench.db" 18081 "")
"$bin" migrate --config "$sqlite" >/dev/null
sqlite_ceiling=$(json --config "$sqlite" --ceiling --concurrency 1 --duration "$DURATION")
show "ceiling: SQLite, one connection" "$sqlite_ceiling"
serve "$sqlite" 18081
sqlite_unique=$(json --config "$sqlite" --concurrency 16 --duration "$DURATION")
show "inlet SQLite, c16, unique" "$sqlite_unique"
sqlite_dups=$(json --config "$sqlite" --concurrency 16 --duration "$DURATION" --duplicates 0.3)
show "inlet SQLite, c16, 30% duplicates" "$sqlite_dups"
stop

echo "== ratios"
python3 - "$pg_tps" "$unique" "$dups" "$sqlite_ceiling" "$sqlite_unique" "$sqlite_dups" "$rate" <<'PY'
import json, sys
pg_tps = float(sys.argv[1])
unique, dups, sq_ceiling, sq_unique, sq_dups, rate = (json.loads(a) for a in sys.argv[2:])
print(f"PostgreSQL unique:  inlet {unique['accepted_per_sec']:.0f}/s / ceiling {pg_tps:.0f}/s = {unique['accepted_per_sec']/pg_tps:.0%}  (target >= 60%)")
print(f"PostgreSQL 30% dup: inlet {dups['requests_per_sec']:.0f} req/s vs unique {unique['requests_per_sec']:.0f} req/s (target: no lower)")
sq = sq_ceiling['accepted_per_sec']
print(f"SQLite unique:      inlet {sq_unique['accepted_per_sec']:.0f}/s / ceiling {sq:.0f}/s = {sq_unique['accepted_per_sec']/sq:.0%}  (target >= 50%)")
print(f"SQLite 30% dup:     inlet {sq_dups['requests_per_sec']:.0f} req/s vs unique {sq_unique['requests_per_sec']:.0f} req/s")
errors = sum(n for s, n in rate['statuses'].items() if s != '200')
print(f"Open loop 1000/s:   p99 {rate['latency_ms']['p99']:.2f} ms (target <= 15), errors {errors}")
PY
