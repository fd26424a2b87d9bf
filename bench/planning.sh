#!/usr/bin/env bash
# Where PostgreSQL's CPU goes while Inlet ingests: `perf record` over the backends of a
# scratch database during a closed-loop run (unique events, one destination, dispatcher
# and sweeper off), then the inclusive share of the stages of each statement — parsing,
# analysis, planning, execution, index insertion and commit — of all the samples in those
# backends. Run it on a quiet machine, after `cargo build --release`.
#
#   bench/planning.sh            # CONCURRENCY=64 DURATION=12 PERF_SECONDS=8
#
# Needs perf (Debian: linux-perf) and root, or perf_event_paranoid ≤ 1. The database is
# PG_ADMIN's server (default the machine's PostgreSQL), the scratch database dropped after.
set -euo pipefail
cd "$(dirname "$0")/.."

PG_ADMIN=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
CONCURRENCY=${CONCURRENCY:-64}
DURATION=${DURATION:-12}
PERF_SECONDS=${PERF_SECONDS:-8}
PORT=${PORT:-18190}
bin=${CARGO_TARGET_DIR:-target}/release/inlet
[ -x "$bin" ] || { echo "build first: cargo build --release"; exit 2; }
command -v perf >/dev/null || { echo "perf is not installed"; exit 2; }

work=$(mktemp -d)
db="inlet_planning_$$"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

psql "$PG_ADMIN" -qc "CREATE DATABASE $db"
cat > "$work/inlet.toml" <<TOML
[server]
bind = "127.0.0.1:$PORT"
[database]
url = "${PG_ADMIN%/*}/$db"
pool_size = 32
[delivery]
enabled = false
[retention]
sweeper = false
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["whsec_bench_secret_for_local_runs_0123456789"]
[[sources.destinations]]
url = "http://127.0.0.1:9/events"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
name = "app"
TOML
"$bin" migrate --config "$work/inlet.toml" >/dev/null
INLET_LOG=warn "$bin" serve --config "$work/inlet.toml" > "$work/serve.log" 2>&1 &
server=$!
ready=""
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && { ready=1; break; }
  sleep 0.1
done
[ -n "$ready" ] || { echo "inlet did not become ready:"; cat "$work/serve.log"; exit 1; }
# Warm up: every connection of the pool opened, its statements prepared.
"$bin" bench --config "$work/inlet.toml" --concurrency "$CONCURRENCY" --duration 3s >/dev/null
"$bin" bench --config "$work/inlet.toml" --concurrency "$CONCURRENCY" --duration "${DURATION}s" \
  > "$work/bench.txt" &
load=$!
sleep 2
pids=$(pgrep -d, -f "postgres: .* $db " || true)
[ -n "$pids" ] || { echo "no PostgreSQL backend of $db on this machine (is PG_ADMIN local?)"; exit 1; }
# perf attaches to backends owned by the postgres user: root, or that user.
if ! perf record -q -F 499 -g -o "$work/perf.data" -p "$pids" -- sleep "$PERF_SECONDS" \
    2> "$work/perf.err"; then
  echo "perf record failed:"; cat "$work/perf.err"; exit 1
fi
wait "$load"
grep -E '^(accepted|latency)' "$work/bench.txt"
perf report -i "$work/perf.data" --children --sort symbol --stdio 2>/dev/null > "$work/report.txt"
python3 - "$work/report.txt" <<'PY'
import re, sys
stages = [
    ("parse", ["pg_parse_query"]),
    ("analyse and rewrite", ["pg_analyze_and_rewrite_varparams", "pg_analyze_and_rewrite_fixedparams"]),
    ("plan", ["pg_plan_queries"]),
    ("execute (PortalRun)", ["PortalRun"]),
    ("  of it index insertion", ["ExecInsertIndexTuples"]),
    ("commit", ["CommitTransactionCommand"]),
]
share = {}
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"\s+([\d.]+)%\s+[\d.]+%\s+\[\.\]\s+(\S+)", line)
    if m:
        share.setdefault(m.group(2), float(m.group(1)))
if not any(s in share for _, symbols in stages for s in symbols):
    sys.exit("perf found none of PostgreSQL's stage functions: are its symbols available?")
print("share of PostgreSQL's CPU samples in this database's backends (inclusive):")
for name, symbols in stages:
    print(f"  {name:<26} {sum(share.get(s, 0.0) for s in symbols):5.1f} %")
PY
