#!/usr/bin/env bash
# What OpenTelemetry tracing costs, in one run per backend, beside the database's own
# ceiling measured in the same run:
#
#   ceiling   `inlet bench --ceiling`: accepted webhooks' statements on the database alone
#             (PostgreSQL: 16 connections; SQLite: one), no HTTP
#   ingest    `inlet serve` (dispatcher off, one destination) loaded by `inlet bench` at
#             concurrency 64 for DURATION, a fresh database each, ROUNDS rounds taking
#             turns (the median): tracing off (no `[telemetry]`), then every trace
#             recorded (`sampling_ratio = 1.0`) and exported over OTLP/HTTP to a collector
#             stand-in (`inlet bench --sink`, 200 at once to every POST); accepted/s,
#             latency and the server's CPU time per webhook
#   drain     one outbox (FILL of ingest at c64, traced), copied, drained by `inlet deliver
#             --once` into a second sink (200 after SINK_DELAY): tracing off, then on;
#             deliveries/s and the ratio
#
# Settings (environment):
#   DURATION=10s  FILL=10s  ROUNDS=3  SINK_DELAY=5ms  BACKENDS="postgres sqlite"
#   PORT_BASE=18480  PG_ADMIN=postgres://postgres@127.0.0.1:5432/postgres
#   BIN=path/to/inlet (default: build this checkout's release binary)
#   BASE_BIN=path/to/inlet  also ingest with this binary (the build before tracing existed,
#             e.g. of commit 265ac44), tracing off, in the same rounds: what having the
#             tracing code costs when it is off
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

DURATION=${DURATION:-10s}
FILL=${FILL:-10s}
ROUNDS=${ROUNDS:-3}
SINK_DELAY=${SINK_DELAY:-5ms}
BACKENDS=${BACKENDS-postgres sqlite}
PORT_BASE=${PORT_BASE:-18480}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
SECRET=whsec_bench_secret_for_local_runs_0123456789
APP=$((PORT_BASE + 10)) COLLECTOR=$((PORT_BASE + 11))

if [ -z "${BIN:-}" ]; then
  echo "== building (release)"
  cargo build --release --quiet --bin inlet
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/inlet}
work=$(mktemp -d)
db="inlet_traces_$$"
server="" sinks=()
cleanup() {
  for pid in "$server" "${sinks[@]}"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  [[ " $BACKENDS " == *" postgres "* ]] && drop_databases
  rm -rf "$work"
}
trap cleanup EXIT

# config NAME URL [DELIVERY_ENABLED] [TRACED]: one stripe source, one destination (the
# application sink); TRACED=on exports every trace to the collector sink.
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
$([ "${4:-off}" = on ] && printf '[telemetry]\notlp_endpoint = "http://127.0.0.1:%s"\nsampling_ratio = 1.0\n' "$COLLECTOR")
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["$SECRET"]
[[sources.destinations]]
url = "http://127.0.0.1:$APP/app"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
name = "app"
TOML
  echo "$work/$1.toml"
}

# sink PORT DELAY: `inlet bench --sink`, answering 200 after DELAY.
sink() {
  INLET_LOG=warn "$bin" bench --config "$(config sink "sqlite://$work/sink.db")" --sink "127.0.0.1:$1" \
    --sink-delay "$2" >"$work/sink-$1.log" 2>&1 &
  sinks+=($!)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$1/count" >/dev/null && return; sleep 0.1; done
  cat "$work/sink-$1.log"; echo "the sink on $1 did not start"; exit 1
}
received() { curl -sf "http://127.0.0.1:$COLLECTOR/count"; }

sink "$APP" "$SINK_DELAY"
sink "$COLLECTOR" 0ms

echo "== machine: $(nproc) cores; each ingest run ${DURATION} at c64, ${ROUNDS} rounds; fill ${FILL}; sink delay ${SINK_DELAY}"
for backend in $BACKENDS; do
  echo "== $backend"
  url=$(fresh "$backend" ceiling)
  clients=16
  [ "$backend" = sqlite ] && clients=1
  "$bin" bench --json --ceiling --config "$(config ceiling "$url")" --concurrency "$clients" --duration "$DURATION" >"$work/ceiling.json"
  ceiling=$(field "$work/ceiling.json" accepted_per_sec)
  printf '  %-34s %9.0f webhooks/s\n' "ceiling (database alone, $clients conn.)" "$ceiling"
  declare -A rate p50 p99 cpu
  modes="off on"
  [ -n "${BASE_BIN:-}" ] && modes="before off on"
  for traced in $modes; do rate[$traced]="" p50[$traced]="" p99[$traced]="" cpu[$traced]=""; done
  for round in $(seq 1 "$ROUNDS"); do
    for traced in $modes; do
      exports=$(received)
      # In this shell, not a subshell: its server is the one the exit trap stops.
      if [ "$traced" = before ]; then
        current=$bin bin=$BASE_BIN
        ingest "$backend" "before_$round" off >"$work/result"
        bin=$current
      else
        ingest "$backend" "${traced}_$round" "$traced" >"$work/result"
      fi
      read -r r a b c <"$work/result"
      rate[$traced]+="$r " p50[$traced]+="$a " p99[$traced]+="$b " cpu[$traced]+="$c "
      [ "$traced" = on ] && echo "    round $round traced: $(( $(received) - exports )) OTLP exports received"
    done
  done
  printf '  %-22s %11s %7s %7s %9s %10s %12s   %s\n' ingest accepted/s "p50 ms" "p99 ms" "vs off" "of ceiling" "server CPU" "rounds (accepted/s)"
  base=$(median ${rate[off]})
  for traced in $modes; do
    # shellcheck disable=SC2086
    r=$(median ${rate[$traced]}) a=$(median ${p50[$traced]}) b=$(median ${p99[$traced]}) c=$(median ${cpu[$traced]})
    [ "$traced" = off ] && cpu_off=$c
    label="tracing $traced"
    [ "$traced" = before ] && label="before tracing existed"
    printf '  %-22s %11.0f %7.2f %7.2f %9s %10s %9.0f µs   %s\n' "$label" "$r" "$a" "$b" "$(ratio "$r" "$base")" "$(ratio "$r" "$ceiling")" "$c" "$(python3 -c 'import sys; print(" ".join(f"{float(x):.0f}" for x in sys.argv[1:]))' ${rate[$traced]})"
  done
  python3 -c "import sys; print(f'  full tracing costs {float(sys.argv[1]) - float(sys.argv[2]):+.0f} µs of server CPU per webhook')" "$c" "$cpu_off"
  unset rate p50 p99 cpu
  filled=$(fresh "$backend" fill)
  cfg=$(config fill "$filled" false on)
  serve "$cfg"
  "$bin" bench --config "$cfg" --concurrency 64 --duration "$FILL" >/dev/null
  stop
  printf '  %-22s %10s %8s %12s %9s\n' drain delivered seconds deliveries/s "vs off"
  drain "$backend" drain_off "$filled" off >"$work/result"
  read -r delivered seconds base <"$work/result"
  printf '  %-22s %10s %8s %12s %9s\n' "tracing off" "$delivered" "$seconds" "$base" "1.00x"
  exports=$(received)
  drain "$backend" drain_on "$filled" on >"$work/result"
  read -r delivered seconds rate_on <"$work/result"
  printf '  %-22s %10s %8s %12s %9s   (%s OTLP exports)\n' "tracing on" "$delivered" "$seconds" "$rate_on" "$(ratio "$rate_on" "$base")" "$(( $(received) - exports ))"
done
