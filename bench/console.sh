#!/usr/bin/env bash
# What the console's search costs, in one run per backend:
#
#   ingest      the database ceiling (`inlet bench --ceiling`: Inlet's own group
#               transaction for accepted webhooks, no HTTP; PostgreSQL 16 connections,
#               SQLite one) on a fresh database with the index the console's type filter
#               uses, `events (event_type, id)`, and on one without it, ROUNDS rounds taking
#               turns, the median of each: the index's cost per webhook at the ceiling
#   search      `inlet serve` on the filled database (the ceiling's rows, ~100 k events of
#               about 400 bytes), signed in to the console, the time of 5 requests each
#               (median) of the events page: unfiltered, by type, by an event id (its
#               index), and by a value inside the payloads (the bounded scan of the newest
#               10,000 events, which finds nothing: the whole scan)
#
# Settings (environment):
#   DURATION=10s  ROUNDS=3  BACKENDS="postgres sqlite"  PORT_BASE=18380
#   BIN=path/to/inlet (default: build this checkout's release binary)
#   PG_ADMIN=postgres://postgres@127.0.0.1:5432/postgres
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
BACKENDS=${BACKENDS-postgres sqlite}
PORT_BASE=${PORT_BASE:-18380}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
SECRET=whsec_bench_secret_for_local_runs_0123456789
TOKEN=bench-operator-token-0123456789abcdef

if [ -z "${BIN:-}" ]; then
  echo "== building (release)"
  cargo build --release --quiet --bin inlet
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/inlet}
work=$(mktemp -d)
db="inlet_console_$$"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  [[ " $BACKENDS " == *" postgres "* ]] && drop_databases
  rm -rf "$work"
}
trap cleanup EXIT

# config NAME URL: one stripe source with one destination, an operator, no dispatcher.
config() {
  cat > "$work/$1.toml" <<TOML
retired_sources = ["bench"]
[operator]
token = "$TOKEN"
[server]
bind = "127.0.0.1:$PORT_BASE"
[database]
url = "$2"
$([ "${2%%:*}" = sqlite ] && echo 'synchronous = "full"' || echo 'pool_size = 32')
[delivery]
enabled = false
[retention]
sweeper = false
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["$SECRET"]
[[sources.destinations]]
url = "http://127.0.0.1:9/app"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
name = "app"
TOML
  echo "$work/$1.toml"
}

# ceiling BACKEND NAME INDEX: accepted/s at the ceiling on a fresh database, with the type
# index (INDEX=with) or without it.
ceiling() {
  local url cfg clients=16
  url=$(fresh "$1" "$2")
  [ "$3" = without ] && sql "$1" "$url" "DROP INDEX events_type_idx" >/dev/null
  [ "$1" = sqlite ] && clients=1
  cfg=$(config "$2" "$url")
  "$bin" bench --json --ceiling --config "$cfg" --concurrency "$clients" --duration "$DURATION" >"$work/$2.json"
  field "$work/$2.json" accepted_per_sec
}

# timed PATH: the median of 5 requests' seconds for a console page, signed in.
timed() {
  local times=()
  for _ in 1 2 3 4 5; do
    times+=("$(curl -s -o /dev/null -w '%{time_total}' -b "$work/cookies" "http://127.0.0.1:$PORT_BASE$1")")
  done
  median "${times[@]}"
}

echo "== machine: $(nproc) cores; each ceiling run ${DURATION}, ${ROUNDS} rounds"
for backend in $BACKENDS; do
  echo "== $backend"
  with=() without=()
  for round in $(seq 1 "$ROUNDS"); do
    with+=("$(ceiling "$backend" "with_$round" with)")
    without+=("$(ceiling "$backend" "without_$round" without)")
  done
  w=$(median "${with[@]}") wo=$(median "${without[@]}")
  printf '  %-44s %9.0f webhooks/s (rounds: %s)\n' "ceiling without events (event_type, id)" "$wo" "${without[*]}"
  printf '  %-44s %9.0f webhooks/s (rounds: %s)\n' "ceiling with it" "$w" "${with[*]}"
  python3 -c "import sys; w, wo = float(sys.argv[1]), float(sys.argv[2]); print(f'  the index costs {100 * (wo - w) / wo:+.1f} % of the ceiling ({1e6 / w - 1e6 / wo:+.1f} µs per webhook)')" "$w" "$wo"
  case $backend in
    postgres) url="${PG_ADMIN%/*}/${db}_with_$ROUNDS" ;;
    sqlite) url="sqlite://$work/with_$ROUNDS.db" ;;
  esac
  events=$(sql "$backend" "$url" "SELECT count(*) FROM events")
  some_id=$(sql "$backend" "$url" "SELECT event_id FROM events ORDER BY id LIMIT 1")
  cfg=$(config serve "$url")
  "$bin" serve --config "$cfg" >"$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT_BASE/readyz" >/dev/null && break; sleep 0.1; done
  curl -s -o /dev/null -c "$work/cookies" --data-urlencode "token=$TOKEN" --data "next=/console" \
    "http://127.0.0.1:$PORT_BASE/console/login"
  printf '  search over %s events (median of 5 requests):\n' "$events"
  for page in "/console/events" "/console/events?type=bench.event" "/console/events?q=$some_id" \
    "/console/events?q=no-such-value-anywhere"; do
    printf '    %-52s %7.1f ms\n' "$page" "$(python3 -c "import sys; print(float(sys.argv[1]) * 1000)" "$(timed "$page")")"
  done
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
done
