#!/usr/bin/env bash
# What a reconciliation run costs (issue 51), on each backend, in one run:
#
#   listed    `inlet reconcile` over LISTED events that Stripe's API (a stand-in,
#             bench/stripe_events.py, 100 a page as Stripe serves them) lists and Inlet
#             has all claimed: the run's seconds and events listed per second — the join
#             of each page with `events`, the cursor committed per page
#   recovered `inlet reconcile` over RECOVER events Inlet never claimed (a fresh
#             database): each claimed through the ingest transaction as fetched, with its
#             fact and outbox row; seconds and events recovered per second
#   ingest    `inlet serve` (dispatcher off, one destination) loaded by `inlet bench` at
#             concurrency 64 for DURATION on the database of the first run: alone, then
#             while runs over the LISTED events go on beside it, one after another for the
#             whole load (the same database): accepted/s and p99, and the ratio
#
# Settings (environment):
#   LISTED=100000  RECOVER=10000  DURATION=10s  BACKENDS="postgres sqlite"
#   PORT_BASE=18580  PG_ADMIN=postgres://postgres@127.0.0.1:5432/postgres
#   BIN=path/to/inlet (default: build this checkout's release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

LISTED=${LISTED:-100000}
RECOVER=${RECOVER:-10000}
DURATION=${DURATION:-10s}
BACKENDS=${BACKENDS-postgres sqlite}
PORT_BASE=${PORT_BASE:-18580}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
SECRET=whsec_bench_secret_for_local_runs_0123456789
KEY=sk_test_bench_reconcile_0123456789abcdef
API=$((PORT_BASE + 20)) SMALL_API=$((PORT_BASE + 21))

if [ -z "${BIN:-}" ]; then
  echo "== building (release)"
  cargo build --release --quiet --bin inlet
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/inlet}
work=$(mktemp -d)
db="inlet_reconcile_$$"
server="" apis=() run=""
declare -A rate
cleanup() {
  for pid in "$server" "$run" "${apis[@]}"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  [[ " $BACKENDS " == *" postgres "* ]] && drop_databases
  rm -rf "$work"
}
trap cleanup EXIT

# config NAME URL [_] [API_PORT]: one stripe source with one destination (dispatcher off);
# with API_PORT, reconciled through the stand-in there.
config() {
  cat > "$work/$1.toml" <<TOML
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
$([ -n "${4:-}" ] && printf '[sources.reconcile]\napi = "stripe"\napi_url = "http://127.0.0.1:%s"\ncredential = "%s"\nlookback = "1d"\nsettle = "1m"\ntypes = ["payment_intent.succeeded"]\n' "$4" "$KEY")
[[sources.destinations]]
url = "http://127.0.0.1:9/app"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
name = "app"
TOML
  echo "$work/$1.toml"
}

# api PORT COUNT: the Stripe stand-in listing COUNT events.
api() {
  python3 bench/stripe_events.py "$1" "$2" "$KEY" &
  apis+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$1/calls" >/dev/null && return; sleep 0.1; done
  echo "the Stripe stand-in on $1 did not start"; exit 1
}

# claim_all BACKEND URL: the LISTED events, as claimed rows of the stripe source.
claim_all() {
  local select="'stripe', 'evt_bench_' || substr('000000' || i, -6, 6), 'payment_intent.succeeded', 'x', 'processed', 'payment_intent.succeeded', 'evt_bench_' || substr('000000' || i, -6, 6)"
  case $1 in
    postgres) psql "$2" -qc "INSERT INTO events (source, event_id, event_type, fingerprint, status, fact_kind, fact_key, payload, received_at, expires_at)
      SELECT 'stripe', 'evt_bench_' || lpad(i::text, 6, '0'), 'payment_intent.succeeded', 'x', 'processed', 'payment_intent.succeeded', 'evt_bench_' || lpad(i::text, 6, '0'), '\\x7b7d'::bytea, now(), now() + interval '35 days'
      FROM generate_series(0, $((LISTED - 1))) AS i; ANALYZE events" ;;
    sqlite) sql sqlite "$2" "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $((LISTED - 1)))
      INSERT INTO events (source, event_id, event_type, fingerprint, status, fact_kind, fact_key, payload, received_at, expires_at)
      SELECT $select, x'7b7d', datetime('now'), datetime('now', '+35 days') FROM n" ;;
  esac
}

# reconcile CONFIG: `inlet reconcile` over the last day; prints seconds, listed, missing, recovered.
reconcile() {
  local started
  started=$(date +%s.%N)
  "$bin" reconcile --config "$1" --source stripe --since 1d >"$work/reconcile.out"
  python3 -c "import re, sys, time
m = re.search(r'listed (\d+), missing (\d+), recovered (\d+)', open(sys.argv[2]).read())
print(f'{time.time() - float(sys.argv[1]):.2f}', *m.groups())" "$started" "$work/reconcile.out"
}

api "$API" "$LISTED"
api "$SMALL_API" "$RECOVER"
echo "== machine: $(nproc) cores; $LISTED events listed, $RECOVER recovered; ingest ${DURATION} at c64"
for backend in $BACKENDS; do
  echo "== $backend"
  url=$(fresh "$backend" listed)
  claim_all "$backend" "$url" >/dev/null
  read -r seconds listed missing _ < <(reconcile "$(config listed "$url" _ "$API")")
  printf '  %-40s %8.1f s  %9.0f listed/s  (%s listed, %s missing)\n' "run over listed events, all claimed" \
    "$seconds" "$(python3 -c "print($listed / $seconds)")" "$listed" "$missing"
  small=$(fresh "$backend" recovered)
  read -r seconds listed missing recovered < <(reconcile "$(config recovered "$small" _ "$SMALL_API")")
  printf '  %-40s %8.1f s  %9.0f recovered/s  (%s of %s missing)\n' "run recovering every event" \
    "$seconds" "$(python3 -c "print($recovered / $seconds)")" "$recovered" "$missing"
  # Ingest on the first database: alone, then beside a run over the listed events.
  plain=$(config ingest "$url")
  for beside in alone run; do
    serve "$plain"
    if [ "$beside" = run ]; then
      # Runs one after another for as long as the load lasts (one takes a few seconds).
      beside_cfg=$(config beside "$url" _ "$API")
      (while :; do "$bin" reconcile --config "$beside_cfg" --source stripe --since 1d >>"$work/beside.log" 2>&1; done) &
      run=$!
    fi
    "$bin" bench --json --config "$plain" --concurrency 64 --duration "$DURATION" >"$work/ingest-$beside.json"
    if [ -n "$run" ]; then
      kill "$run" 2>/dev/null; wait "$run" 2>/dev/null || true
      pkill -f "reconcile --config $beside_cfg" 2>/dev/null || true
      run=""
      still="($(grep -c '^listed' "$work/beside.log") runs over the listed events meanwhile)"
      [ "${KEEP_LOG:-}" ] && cp "$work/beside.log" "$KEEP_LOG"
    fi
    stop
    rate[$beside]=$(field "$work/ingest-$beside.json" accepted_per_sec)
    printf '  %-40s %8.0f webhooks/s  p99 %6.1f ms %s\n' "ingest c64, $beside" "${rate[$beside]}" \
      "$(field "$work/ingest-$beside.json" latency_ms p99)" "$([ "$beside" = run ] && echo "$still")"
  done
  echo "  ingest beside a run: $(ratio "${rate[run]}" "${rate[alone]}") of alone"
done
