#!/usr/bin/env bash
# How long a slow destination's backlog delays a healthy destination's first attempt, in
# one run per backend (release build, `delivery.concurrency = 16` as in the report that
# found it). A stripe source has two destinations, `slow` (an `inlet bench --sink` that
# answers after SLOW_DELAY) and `fast` (one that answers after 5 ms); a second source has
# one fast destination, `apart`. Each round posts BACKLOG facts for `slow` at once, waits
# until its deliveries are out, then posts one fact for `fast` and one for `apart`, and
# reads from the database how long after its row was written each got its first attempt
# (`delivery_attempts.started_at - deliveries.created_at`). A control round with no
# backlog shows the dispatcher's cadence alone. Settings (environment):
#   ROUNDS=5  BACKLOG=40  SLOW_DELAY=30s  BACKENDS="postgres sqlite"  PORT_BASE=18480
#   INLET_BIN (default: build and use this checkout's release binary)
#   PG_ADMIN=postgres://postgres@127.0.0.1:5432/postgres
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
BACKLOG=${BACKLOG:-40}
SLOW_DELAY=${SLOW_DELAY:-30s}
BACKENDS=${BACKENDS-postgres sqlite}
PORT_BASE=${PORT_BASE:-18480}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
SECRET=whsec_bench0secret0for0local0runs0only
APP_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw

# INLET_BIN: another build to measure (say, one from before a change), used as it is.
bin=${INLET_BIN:-${CARGO_TARGET_DIR:-target}/release/inlet}
# The backlog is posted in parallel by this script itself: `fairness.sh __post SOURCE ID TYPE`.
if [ "${1:-}" = __post ]; then
  printf '{"id":"%s","object":"event","type":"%s","data":{"object":{"id":"%s"}}}' "$3" "$4" "$3" \
    > "$work/$3.json"
  "$bin" send --config "$work/inlet.toml" --source "$2" --body "$work/$3.json" >"$work/$3.answer" 2>&1 \
    || { echo "posting $3 failed:" >&2; cat "$work/$3.answer" >&2; exit 1; }
  exit 0
fi

if [ -z "${INLET_BIN:-}" ]; then
  echo "== building (release)"
  cargo build --release --quiet
fi
work=$(mktemp -d)
export work
db="inlet_fairness_$$"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# config URL: the two sources, their three destinations, 16 delivery slots.
config() {
  cat > "$work/inlet.toml" <<TOML
[server]
bind = "127.0.0.1:$PORT_BASE"
[database]
url = "$1"
[delivery]
concurrency = 16
poll_interval = "1s"
lease = "90s"
[retention]
sweeper = false
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["$SECRET"]
[[sources.destinations]]
url = "http://127.0.0.1:$((PORT_BASE + 1))/slow"
secret = "$APP_SECRET"
name = "slow"
events = ["slow.*"]
timeout = "60s"
[[sources.destinations]]
url = "http://127.0.0.1:$((PORT_BASE + 2))/fast"
secret = "$APP_SECRET"
name = "fast"
events = ["fast.*"]
[[sources]]
name = "other"
scheme = "stripe"
secrets = ["$SECRET"]
[[sources.destinations]]
url = "http://127.0.0.1:$((PORT_BASE + 2))/apart"
secret = "$APP_SECRET"
name = "apart"
TOML
  echo "$work/inlet.toml"
}

sql() {
  case $1 in
    postgres) psql "$2" -tAc "$3" ;;
    sqlite) python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); [print(*r, sep="|") for r in c.execute(sys.argv[2])]' "${2#sqlite://}" "$3" ;;
  esac
}

# post SOURCE ID TYPE: one signed event, through `inlet send`.
post() {
  "$0" __post "$@"
}

# in_flight BACKEND URL DESTINATION: its deliveries leased now.
in_flight() {
  sql "$1" "$2" "SELECT count(*) FROM deliveries WHERE destination = '$3' AND status = 'in_progress'"
}

# first_attempt_ms BACKEND URL ID: ms from the delivery row of ID to its first attempt.
first_attempt_ms() {
  local expr
  case $1 in
    postgres) expr="EXTRACT(EPOCH FROM (min(a.started_at) - d.created_at)) * 1000" ;;
    sqlite) expr="(julianday(min(a.started_at)) - julianday(d.created_at)) * 86400000" ;;
  esac
  for _ in $(seq 900); do
    local ms
    ms=$(sql "$1" "$2" "SELECT round($expr) FROM deliveries d JOIN delivery_attempts a ON a.delivery_id = d.id WHERE d.event_id = '$3' GROUP BY d.created_at")
    [ -n "$ms" ] && { echo "$ms"; return; }
    sleep 0.1
  done
  echo "no attempt for $3" >&2; exit 1
}

# round BACKEND URL N BACKLOG: posts the backlog, then the two healthy facts; prints their delays.
round() {
  local n
  for n in $(seq "$4"); do echo "r$3s$n"; done \
    | xargs -P 8 -I{} "$0" __post stripe {} slow.thing
  if [ "$4" -gt 0 ]; then
    for _ in $(seq 100); do
      [ "$(in_flight "$1" "$2" slow)" -ge 1 ] && break
      sleep 0.1
    done
    sleep 1
  fi
  post stripe "r$3fast" fast.thing
  post other "r$3apart" other.thing
  echo "$(first_attempt_ms "$1" "$2" "r$3fast") $(first_attempt_ms "$1" "$2" "r$3apart") $(in_flight "$1" "$2" slow)"
}

start() {
  "$bin" bench --config "$cfg" --sink "127.0.0.1:$1" --sink-delay "$2" >"$work/sink-$1.log" 2>&1 &
  pids+=($!)
}

echo "== machine: $(nproc) cores; concurrency 16; backlog $BACKLOG; slow answers after $SLOW_DELAY"
for backend in $BACKENDS; do
  case $backend in
    postgres) psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)"; psql "$PG_ADMIN" -qc "CREATE DATABASE $db"; url="${PG_ADMIN%/*}/$db" ;;
    sqlite) rm -f "$work/fair.db"*; url="sqlite://$work/fair.db" ;;
  esac
  cfg=$(config "$url")
  start $((PORT_BASE + 1)) "$SLOW_DELAY"
  start $((PORT_BASE + 2)) 5ms
  "$bin" serve --config "$cfg" >"$work/serve-$backend.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT_BASE/readyz" >/dev/null && break; sleep 0.1; done
  echo "== $backend (ms from the row to its first attempt; slow in flight at the time)"
  printf '  %-8s %8s %8s %10s\n' round fast apart "slow out"
  read -r f a s < <(round "$backend" "$url" 0 0)
  printf '  %-8s %8s %8s %10s\n' control "$f" "$a" "$s"
  for r in $(seq "$ROUNDS"); do
    read -r f a s < <(round "$backend" "$url" "$r" "$BACKLOG")
    printf '  %-8s %8s %8s %10s\n' "$r" "$f" "$a" "$s"
  done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  pids=()
done
