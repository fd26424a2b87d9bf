#!/usr/bin/env bash
# What destinations cost at startup: `inlet serve` (release build) on configurations with
# COUNTS destinations, in two shapes, on each backend:
#
#   sources   N sources with one HTTP destination each
#   one       one source with N HTTP destinations
#   filtered  N sources with one HTTP destination each, every one with the same jq
#             filter (`.type == "x"`): each distinct expression is checked once
#
# For each: seconds from the process start until it listens (`GET /healthz` answers), until
# `GET /readyz` answers 200, and until a signed webhook is accepted (by a source of its
# own, `probe`, which has no destination); its resident memory then (VmRSS, from /proc),
# after the idle period (Inlet hands freed memory back every 10 s) and at its peak (VmHWM);
# and the CPU it uses while idle with its dispatcher running (over IDLE seconds, SETTLE
# seconds after the webhook, in % of one core). The database is migrated beforehand, so the figures are the destinations'
# (and the sources') own cost. A run that is not ready after TIMEOUT seconds, or whose
# memory passes MAX_RSS_MB, is stopped and reported as such.
#
# Then, on the smallest and on the largest configuration of shapes `sources` and
# `filtered`: a reload (`POST /admin/reload`) that adds RELOAD sources with a destination
# each (filtered alike in the second), its duration,
# and how long a `GET /healthz` sent 50 ms into it took to answer (the server runs one
# HTTP worker, so a reload that holds its worker holds that request too).
#
# Settings (environment):
#   COUNTS="10 1000 10000"  SHAPES="sources one filtered"  BACKENDS="postgres sqlite"
#   TIMEOUT=120  MAX_RSS_MB=3000  RELOAD=200  SETTLE=5  IDLE=5  PORT_BASE=18380
#   PG_ADMIN=postgres://postgres@127.0.0.1:5432/postgres
#   BIN=path/to/inlet      measure that binary instead of building this checkout's
set -euo pipefail
cd "$(dirname "$0")/.."

COUNTS=${COUNTS:-10 1000 10000}
SHAPES=${SHAPES:-sources one filtered}
BACKENDS=${BACKENDS-postgres sqlite}
TIMEOUT=${TIMEOUT:-120}
MAX_RSS_MB=${MAX_RSS_MB:-3000}
RELOAD=${RELOAD:-200}
IDLE=${IDLE:-5}
SETTLE=${SETTLE:-5}
PORT_BASE=${PORT_BASE:-18380}
PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
TOKEN=bench_operator_token_for_local_runs_only
PORT=$PORT_BASE
export PGOPTIONS="--client-min-messages=warning"

if [ -z "${BIN:-}" ]; then
  echo "== building (release)"
  cargo build --release --quiet
  BIN=${CARGO_TARGET_DIR:-target}/release/inlet
fi
work=$(mktemp -d)
db="inlet_startup_$$"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# config FILE URL SHAPE COUNT [EXTRA_SOURCES]: writes a configuration.
config() {
  python3 - "$@" "$PORT" "$TOKEN" <<'PY'
import sys
path, url, shape, count, extra, port, token = sys.argv[1:8]
count, extra = int(count), int(extra)
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
out = [f'[server]\nbind = "127.0.0.1:{port}"\nworkers = 1\n',
       f'[database]\nurl = "{url}"\n', f'[operator]\ntoken = "{token}"\n',
       '[retention]\nsweeper = false\n']
filter = "filter = '.type == \"x\"'\n" if shape == "filtered" else ""
def source(name, destinations):
    out.append(f'[[sources]]\nname = "{name}"\nscheme = "github"\n'
               f'secrets = ["bench_secret_of_{name}_long_enough"]\n')
    for d in destinations:
        out.append(f'[[sources.destinations]]\nurl = "http://127.0.0.1:9/{name}/{d}"\n'
                   f'secret = "{secret}"\n{filter}')
if shape == "one":
    source("one", range(count))
else:
    for i in range(count):
        source(f"s{i}", [0])
for i in range(extra):
    source(f"added{i}", [0])
source("probe", [])
open(path, "w").write("\n".join(out))
PY
}

# fresh BACKEND: a migrated, empty database; prints its URL.
fresh() {
  local url
  case $1 in
    postgres)
      psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
      psql "$PG_ADMIN" -qc "CREATE DATABASE $db"
      url="${PG_ADMIN%/*}/$db" ;;
    sqlite)
      rm -f "$work"/startup.db*
      url="sqlite://$work/startup.db" ;;
  esac
  config "$work/migrate.toml" "$url" sources 0 0
  "$BIN" migrate --config "$work/migrate.toml" >/dev/null 2>&1
  echo "$url"
}

ms() { echo $(( $(date +%s%N) / 1000000 )); }
seconds() { printf '%d.%02d' $(( $1 / 1000 )) $(( $1 % 1000 / 10 )); }
mb() { awk -v k="$2" '$1 == k":" {printf "%.0f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "-"; }

# measure BACKEND SHAPE COUNT: starts Inlet on a fresh database and sets listening, ready
# (seconds, "-" when it never was), rss and peak (MB); the server keeps running.
measure() {
  local started elapsed rss_kb
  url=$(fresh "$1")
  config "$work/run.toml" "$url" "$2" "$3" 0
  listening="-" ready="-"
  if curl -so /dev/null --max-time 2 "http://127.0.0.1:$PORT/"; then
    echo "something else answers on port $PORT: set PORT_BASE" >&2
    exit 1
  fi
  started=$(ms)
  INLET_LOG=warn "$BIN" serve --config "$work/run.toml" >"$work/serve.log" 2>&1 &
  server=$!
  # The listener is bound before the destinations are built: a connection is accepted
  # early, and answered once Inlet serves. Each time is taken when the answer came.
  while kill -0 "$server" 2>/dev/null; do
    if [ "$listening" = "-" ] && curl -so /dev/null --max-time 5 "http://127.0.0.1:$PORT/healthz"; then
      listening=$(seconds $(( $(ms) - started )))
    fi
    if [ "$listening" != "-" ] && curl -sfo /dev/null --max-time 5 "http://127.0.0.1:$PORT/readyz"; then
      ready=$(seconds $(( $(ms) - started )))
      break
    fi
    elapsed=$(( $(ms) - started ))
    rss_kb=$(awk '$1 == "VmRSS:" {print $2}' "/proc/$server/status" 2>/dev/null || echo 0)
    if [ "$elapsed" -ge $((TIMEOUT * 1000)) ] || [ "${rss_kb:-0}" -gt $((MAX_RSS_MB * 1024)) ]; then
      break
    fi
    sleep 0.05
  done
  accepted="-" idle="-"
  [ "$ready" != "-" ] && accepted=$(accept "$started")
  rss=$(mb "$server" VmRSS)
  [ "$ready" != "-" ] && idle=$(idle_cpu "$server")
  later=$(mb "$server" VmRSS) peak=$(mb "$server" VmHWM)
}

# accept STARTED: posts a signed GitHub webhook to the source `probe` until it is accepted
# (a 503 while the database is busy is retried); prints the seconds since STARTED.
accept() {
  local name=probe body='{"zen":"bench"}' signature status
  signature=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "bench_secret_of_${name}_long_enough" | sed 's/^.* //')
  while :; do
    status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 -X POST \
      -H "X-GitHub-Delivery: bench-$$" -H 'X-GitHub-Event: ping' -H 'Content-Type: application/json' \
      -H "X-Hub-Signature-256: sha256=$signature" -d "$body" "http://127.0.0.1:$PORT/webhooks/$name") || true
    [ "$status" = 200 ] && { seconds $(( $(ms) - $1 )); return; }
    if [ "$status" != 503 ] && [ "$status" != 000 ]; then echo "HTTP$status"; return; fi
    [ $(( $(ms) - $1 )) -ge $((TIMEOUT * 1000)) ] && { echo "-"; return; }
    sleep 0.05
  done
}

# idle_cpu PID: the CPU PID uses over IDLE seconds after SETTLE, in % of one core.
idle_cpu() {
  local before after ticks
  ticks=$(getconf CLK_TCK)
  sleep "$SETTLE"
  before=$(awk '{print $14 + $15}' "/proc/$1/stat")
  sleep "$IDLE"
  after=$(awk '{print $14 + $15}' "/proc/$1/stat")
  echo $(( (after - before) * 100 / ticks / IDLE ))
}

stop() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
}

# reload BACKEND SHAPE COUNT: on COUNT destinations of SHAPE, a reload adding RELOAD
# destinations; prints its seconds and how long the request sent during it took, and the
# resident memory at the peak.
reload() {
  local started during answered took reloading
  measure "$1" "$2" "$3"
  if [ "$ready" = "-" ]; then printf '  %-9s %-8s %12s %s\n' "$1" "$2" "$3" "not ready"; stop; return; fi
  config "$work/run.toml" "$url" "$2" "$3" "$RELOAD"
  started=$(ms)
  curl -sf -o "$work/reload.json" -X POST -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' -d '{}' "http://127.0.0.1:$PORT/admin/reload" &
  reloading=$!
  sleep 0.05
  during=$(ms)
  if curl -so /dev/null --max-time 120 "http://127.0.0.1:$PORT/healthz"; then
    answered=$(seconds $(( $(ms) - during )))
  else
    answered="no answer"
  fi
  if ! wait "$reloading"; then printf '  %-9s %-8s %12s %s\n' "$1" "$2" "$3" "the reload failed"; stop; return; fi
  took=$(seconds $(( $(ms) - started )))
  peak=$(mb "$server" VmHWM)
  stop
  printf '  %-9s %-8s %12s %8s %8s %s\n' "$1" "$2" "$3" "$took" "$peak" "$answered"
}

echo "== machine: $(nproc) cores; $("$BIN" --version 2>/dev/null || echo inlet)"
for backend in $BACKENDS; do
  echo "== $backend: seconds to listening, to ready and to a webhook accepted; resident MB then, later and at the peak; idle CPU"
  printf '  %-8s %12s %10s %8s %9s %7s %9s %8s %9s\n' shape destinations listening ready accepted "RSS MB" "later MB" "peak MB" "idle CPU%"
  for shape in $SHAPES; do
    for count in $COUNTS; do
      measure "$backend" "$shape" "$count"
      [ "$ready" = "-" ] && tail -3 "$work/serve.log" >&2
      stop
      printf '  %-8s %12s %10s %8s %9s %7s %9s %8s %9s\n' "$shape" "$count" "$listening" "$ready" "$accepted" "$rss" "$later" "$peak" "$idle"
    done
  done
done
echo "== reload adding $RELOAD sources with a destination each: seconds, peak MB, and a /healthz sent during it"
printf '  %-9s %-8s %12s %8s %8s %s\n' backend shape destinations seconds "peak MB" "healthz answered after"
sorted=$(echo "$COUNTS" | tr ' ' '\n' | sort -n)
for backend in $BACKENDS; do
  for shape in sources filtered; do
    for count in $(echo "$sorted" | head -1) $(echo "$sorted" | tail -1); do
      reload "$backend" "$shape" "$count"
    done
  done
done
