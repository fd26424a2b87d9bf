#!/usr/bin/env bash
# What jq filters and transforms cost, in one run per backend, beside the database's own
# ceiling measured in the same run:
#
#   ceiling     `inlet bench --ceiling`: accepted webhooks' statements on the database
#               alone (PostgreSQL: 16 connections; SQLite: one), no HTTP, no filter
#   ingest      `inlet serve` (dispatcher off) loaded by `inlet bench` at concurrency 64
#               for DURATION, a fresh database each, with
#                 plain1    one destination, no filter (every webhook writes one row)
#                 filter1   the same destination with a filter that takes every event
#                 plain5    five destinations, no filter (five rows per webhook)
#                 filter5   the same five, each with that filter (five evaluations)
#               reported as accepted/s and latency, and the ratio of each filtered run to
#               the plain run with as many rows
#   evaluate    `inlet bench --evaluate`: the filter decided on a 1 KiB payload by the live
#               evaluator processes alone (jq.workers, 2), from 64 callers, 1 and 5
#               filters per job: evaluations/s and each job's latency — the isolation's
#               own price, without HTTP or the database
#   drain       one outbox (FILL of ingest at c64), copied, drained by `inlet deliver
#               --once` into `inlet bench --sink` (200 after SINK_DELAY): plain, then with
#               a transform on the destination; deliveries/s and the ratio
#
# The filter reads the payload and compares (`.type == "bench.event" and (.data.object.id
# | startswith("obj_"))`); the transform builds a three-field object with `$type`.
# Settings (environment):
#   DURATION=10s  FILL=10s  SINK_DELAY=5ms  BACKENDS="postgres sqlite"  PORT_BASE=18280
#   BIN=path/to/inlet (default: build this checkout's release binary)
#   PG_ADMIN=postgres://postgres@127.0.0.1:5432/postgres
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

DURATION=${DURATION:-10s}
FILL=${FILL:-10s}
SINK_DELAY=${SINK_DELAY:-5ms}
BACKENDS=${BACKENDS-postgres sqlite}
PORT_BASE=${PORT_BASE:-18280}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
SECRET=whsec_bench_secret_for_local_runs_0123456789
FILTER='.type == "bench.event" and (.data.object.id | startswith("obj_"))'
TRANSFORM='{id: .id, type: $type, object: .data.object.id}'

if [ -z "${BIN:-}" ]; then
  echo "== building (release)"
  cargo build --release --quiet --bin inlet
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/inlet}
work=$(mktemp -d)
db="inlet_filters_$$"
server="" sink=""
cleanup() {
  for pid in "$server" "$sink"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  [[ " $BACKENDS " == *" postgres "* ]] && drop_databases
  rm -rf "$work"
}
trap cleanup EXIT

# destinations COUNT LINES: COUNT destination tables to the sink, each with LINES.
destinations() {
  local i
  for i in $(seq 1 "$1"); do
    printf '[[sources.destinations]]\nurl = "http://127.0.0.1:%s/app%s"\n' "$((PORT_BASE + 10))" "$i"
    printf 'secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"\nname = "app%s"\n%s\n' "$i" "$2"
  done
}

# config NAME URL DELIVERY_ENABLED DESTINATION_TABLES: one stripe source.
config() {
  cat > "$work/$1.toml" <<TOML
retired_sources = ["bench"]
[server]
bind = "127.0.0.1:$PORT_BASE"
[database]
url = "$2"
$([ "${2%%:*}" = sqlite ] && echo 'synchronous = "full"' || echo 'pool_size = 32')
[delivery]
enabled = ${3:-false}
[retention]
sweeper = false
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["$SECRET"]
${4:-}
TOML
  echo "$work/$1.toml"
}


sink_cfg=$(config sink "sqlite://$work/sink.db" false "")
INLET_LOG=warn "$bin" bench --config "$sink_cfg" --sink "127.0.0.1:$((PORT_BASE + 10))" \
  --sink-delay "$SINK_DELAY" >"$work/sink.log" 2>&1 &
sink=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$((PORT_BASE + 10))/count" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$((PORT_BASE + 10))/count" >/dev/null || { cat "$work/sink.log"; echo "the sink did not start"; exit 1; }

echo "== machine: $(nproc) cores; each ingest run ${DURATION} at c64; fill ${FILL}; sink delay ${SINK_DELAY}"
echo "== jq evaluator processes alone (no HTTP, no database)"
printf '  %-30s %13s %7s %7s\n' evaluate evaluations/s "p50 ms" "p99 ms"
for filters in 1 5; do
  "$bin" bench --json --config "$sink_cfg" --evaluate "$FILTER" --filters "$filters" \
    --concurrency 64 --duration "$DURATION" >"$work/evaluate.json"
  printf '  %-30s %13.0f %7.2f %7.2f\n' "$filters filter(s) per job" \
    "$(field "$work/evaluate.json" accepted_per_sec)" \
    "$(field "$work/evaluate.json" latency_ms p50)" "$(field "$work/evaluate.json" latency_ms p99)"
done
for backend in $BACKENDS; do
  echo "== $backend"
  url=$(fresh "$backend" ceiling)
  clients=16
  [ "$backend" = sqlite ] && clients=1
  cfg=$(config ceiling "$url" false "$(destinations 1 "")")
  "$bin" bench --json --ceiling --config "$cfg" --concurrency "$clients" --duration "$DURATION" >"$work/ceiling.json"
  ceiling=$(field "$work/ceiling.json" accepted_per_sec)
  printf '  %-34s %9.0f webhooks/s\n' "ceiling (database alone, $clients conn.)" "$ceiling"
  printf '  %-30s %11s %7s %7s %9s %10s %12s\n' ingest accepted/s "p50 ms" "p99 ms" "vs plain" "of ceiling" "server CPU"
  for pair in "1 plain1 filter1" "5 plain5 filter5"; do
    read -r count plain filtered <<<"$pair"
    ingest "$backend" "$plain" "$(destinations "$count" "")" >"$work/result"
    read -r base p50 p99 cpu_base <"$work/result"
    printf '  %-30s %11.0f %7.2f %7.2f %9s %10s %9s µs\n' "$plain ($count destination(s))" "$base" "$p50" "$p99" "1.00x" "$(ratio "$base" "$ceiling")" "$cpu_base"
    ingest "$backend" "$filtered" "$(destinations "$count" "filter = '$FILTER'")" >"$work/result"
    read -r rate p50 p99 cpu <"$work/result"
    printf '  %-30s %11.0f %7.2f %7.2f %9s %10s %9s µs (+%s)\n' "$filtered ($count filter(s) each)" "$rate" "$p50" "$p99" "$(ratio "$rate" "$base")" "$(ratio "$rate" "$ceiling")" "$cpu" "$((cpu - cpu_base))"
  done
  filled=$(fresh "$backend" fill)
  cfg=$(config fill "$filled" false "$(destinations 1 "")")
  serve "$cfg"
  "$bin" bench --config "$cfg" --concurrency 64 --duration "$FILL" >/dev/null
  stop
  printf '  %-34s %10s %8s %12s %9s\n' drain delivered seconds deliveries/s "vs plain"
  drain "$backend" drain_plain "$filled" "$(destinations 1 "")" >"$work/result"
  read -r delivered seconds base <"$work/result"
  printf '  %-34s %10s %8s %12s %9s\n' "plain" "$delivered" "$seconds" "$base" "1.00x"
  drain "$backend" drain_transform "$filled" "$(destinations 1 "transform = '$TRANSFORM'")" >"$work/result"
  read -r delivered seconds rate <"$work/result"
  printf '  %-34s %10s %8s %12s %9s\n' "transform" "$delivered" "$seconds" "$rate" "$(ratio "$rate" "$base")"
done
