#!/usr/bin/env bash
# What the destination gates (circuit breaker, max_in_flight, rate) cost the dispatcher, in
# one run per backend: the same outbox, drained by `inlet deliver --once` (release build)
# into `inlet bench --sink` (200 after SINK_DELAY), once per gate setting:
#
#   off        breaker = { failures = 0 }: no gate is read (the lease path of before)
#   breaker    the default breaker: every lease round reads the gate rows, every settle
#              group reads them (and writes only a destination that is failing or open)
#   in_flight  max_in_flight = 1000000: every round also locks the gate rows and counts
#              the deliveries in flight across instances
#   rate       rate = 1000000: the same, plus a bucket update per round
#   held       the default breaker, with the other destination's breaker open: its rows
#              stay in the outbox, and every lease of the first reads past them
#
# The outbox is filled once per backend (FILL of loading at concurrency 64 through
# `inlet serve` with the dispatcher off; two destinations, so two rows per webhook) and
# copied for each setting. Prints deliveries/s per setting; the first setting is the
# yardstick. Settings (environment):
#   FILL=10s  SINK_DELAY=5ms  BACKENDS="postgres sqlite"  PORT_BASE=18180  SETTINGS="off …"
#   BIN=path/to/inlet (default: build this checkout's release binary)
#   PG_ADMIN=postgres://postgres@127.0.0.1:5432/postgres
set -euo pipefail
cd "$(dirname "$0")/.."

FILL=${FILL:-10s}
SINK_DELAY=${SINK_DELAY:-5ms}
BACKENDS=${BACKENDS-postgres sqlite}
PORT_BASE=${PORT_BASE:-18180}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
SECRET=whsec_bench_secret_for_local_runs_0123456789
read -r -a SETTINGS <<< "${SETTINGS:-off breaker in_flight rate held}"

# BIN: another build to measure (one from before a change, say), used as it is.
if [ -z "${BIN:-}" ]; then
  echo "== building (release)"
  cargo build --release --quiet
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/inlet}
work=$(mktemp -d)
db="inlet_gates_$$"
server="" sink=""
cleanup() {
  for pid in "$server" "$sink"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  for name in "$db" $(printf "${db}_%s " "${SETTINGS[@]}"); do
    psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $name WITH (FORCE)" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# gate_lines SETTING: the lines of both destinations' tables.
gate_lines() {
  case $1 in
    off) echo 'breaker = { failures = 0 }' ;;
    in_flight) echo 'max_in_flight = 1000000' ;;
    rate) echo 'rate = 1000000' ;;
    *) echo '' ;;
  esac
}

# config NAME URL DELIVERY_ENABLED GATE_LINES: one stripe source, destinations app and down.
config() {
  cat > "$work/$1.toml" <<TOML
[server]
bind = "127.0.0.1:$PORT_BASE"
[database]
url = "$2"
[delivery]
enabled = $3
[retention]
sweeper = false
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["$SECRET"]
[[sources.destinations]]
url = "http://127.0.0.1:$((PORT_BASE + 10))/app"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
name = "app"
$4
[[sources.destinations]]
url = "http://127.0.0.1:$((PORT_BASE + 10))/down"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
name = "down"
$4
TOML
  echo "$work/$1.toml"
}

wait_ready() {
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT_BASE/readyz" >/dev/null && return; sleep 0.1; done
  echo "Inlet did not become ready"; exit 1
}

# fill BACKEND URL: the outbox of URL, loaded for FILL.
fill() {
  local cfg
  cfg=$(config fill "$2" false "")
  "$bin" serve --config "$cfg" >"$work/serve.log" 2>&1 &
  server=$!
  wait_ready
  "$bin" bench --config "$cfg" --concurrency 64 --duration "$FILL" >/dev/null
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
}

# copy BACKEND SETTING: a fresh copy of the filled outbox; prints its URL.
copy() {
  case $1 in
    postgres)
      psql "$PG_ADMIN" -qc "CREATE DATABASE ${db}_$2 TEMPLATE $db"
      echo "${PG_ADMIN%/*}/${db}_$2" ;;
    sqlite)
      cp "$work/filled.db" "$work/$2.db"
      echo "sqlite://$work/$2.db" ;;
  esac
}

sql() {
  case $1 in
    postgres) psql "$2" -tAc "$3" ;;
    sqlite) python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(*c.execute(sys.argv[2]).fetchone()); c.commit()' "${2#sqlite://}" "$3" ;;
  esac
}

# hold BACKEND URL: opens the breaker of destination down for an hour.
hold() {
  local later="'2100-01-01 00:00:00'"
  sql "$1" "$2" "INSERT INTO destination_gates (source, destination, failures, open_until, cooldown_ms, opened_at, tokens) VALUES ('stripe', 'down', 10, $later, 3600000, $later, 0) RETURNING source" >/dev/null
}

# drain BACKEND SETTING: deliveries/s of `inlet deliver --once` on a copy.
drain() {
  local url cfg started seconds delivered
  url=$(copy "$1" "$2")
  [ "$2" = held ] && hold "$1" "$url"
  cfg=$(config "$2" "$url" true "$(gate_lines "$2")")
  started=$(date +%s.%N)
  "$bin" deliver --once --config "$cfg" >"$work/deliver-$1-$2.log" 2>&1
  seconds=$(python3 -c "import sys,time; print(time.time() - float(sys.argv[1]))" "$started")
  delivered=$(sql "$1" "$url" "SELECT count(*) FROM deliveries WHERE status = 'delivered'")
  if [ "$delivered" = 0 ]; then
    tail -5 "$work/deliver-$1-$2.log" >&2; echo "nothing was delivered ($1, $2)" >&2; exit 1
  fi
  python3 -c "import sys; d, s = int(sys.argv[1]), float(sys.argv[2]); print(f'{d} {s:.2f} {d / s:.0f}')" "$delivered" "$seconds"
}

sink_cfg=$(config sink "sqlite://$work/sink.db" false "")
INLET_LOG=warn "$bin" bench --config "$sink_cfg" --sink "127.0.0.1:$((PORT_BASE + 10))" \
  --sink-delay "$SINK_DELAY" >"$work/sink.log" 2>&1 &
sink=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$((PORT_BASE + 10))/count" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$((PORT_BASE + 10))/count" >/dev/null || { cat "$work/sink.log"; echo "the sink did not start"; exit 1; }
echo "== machine: $(nproc) cores; sink delay $SINK_DELAY; fill $FILL at c64"
for backend in $BACKENDS; do
  case $backend in
    postgres)
      psql "$PG_ADMIN" -qc "CREATE DATABASE $db"
      fill postgres "${PG_ADMIN%/*}/$db" ;;
    sqlite) fill sqlite "sqlite://$work/filled.db" ;;
  esac
  rows=$(sql "$backend" "$( [ "$backend" = postgres ] && echo "${PG_ADMIN%/*}/$db" || echo "sqlite://$work/filled.db")" "SELECT count(*) FROM deliveries")
  echo "== $backend: $rows deliveries in the outbox"
  printf '  %-10s %10s %8s %12s %8s\n' setting delivered seconds "deliveries/s" "vs off"
  base=""
  for setting in "${SETTINGS[@]}"; do
    read -r delivered seconds rate < <(drain "$backend" "$setting")
    base=${base:-$rate}
    printf '  %-10s %10s %8s %12s %7.2fx\n' "$setting" "$delivered" "$seconds" "$rate" \
      "$(python3 -c "print($rate / $base)")"
  done
done
