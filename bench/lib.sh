# Helpers shared by the bench scripts that source it (filters.sh, console.sh, traces.sh).
# They use the sourcing script's globals: bin (the inlet binary), work (a scratch
# directory), db (the prefix of its PostgreSQL databases), PG_ADMIN, PORT_BASE, server
# (the pid of the `inlet serve` it started), and its own `config NAME URL …` function,
# which writes a configuration file and prints its path.

# fresh BACKEND NAME: an empty, migrated database; prints its URL.
fresh() {
  local url
  case $1 in
    postgres)
      psql "$PG_ADMIN" -qc "CREATE DATABASE ${db}_$2"
      url="${PG_ADMIN%/*}/${db}_$2" ;;
    sqlite) url="sqlite://$work/$2.db" ;;
  esac
  "$bin" migrate --config "$(config migrate "$url")" >/dev/null
  echo "$url"
}

# drop_databases: the run's PostgreSQL databases (for its exit trap).
drop_databases() {
  for name in $(psql "$PG_ADMIN" -tAc "SELECT datname FROM pg_database WHERE starts_with(datname, '${db}_')" 2>/dev/null); do
    psql "$PG_ADMIN" -qc "DROP DATABASE IF EXISTS $name WITH (FORCE)" >/dev/null 2>&1 || true
  done
}

# serve CONFIG: `inlet serve` in the background (its pid in $server), once ready.
serve() {
  "$bin" serve --config "$1" >"$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT_BASE/readyz" >/dev/null && return; sleep 0.1; done
  cat "$work/serve.log"; echo "Inlet did not become ready"; exit 1
}
stop() { kill "$server"; wait "$server" 2>/dev/null || true; server=""; }

# sql BACKEND URL STATEMENT: the first row of a statement's answer.
sql() {
  case $1 in
    postgres) psql "$2" -tAc "$3" ;;
    sqlite) python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); r=c.execute(sys.argv[2]).fetchone(); c.commit(); print(*(r or ()))' "${2#sqlite://}" "$3" ;;
  esac
}

# field JSON KEY...: a figure of an `inlet bench --json` result.
field() {
  python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    r = r[k]
print(r)' "$@"
}

median() { python3 -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / max(float(sys.argv[2]), 1e-9):.2f}x')" "$1" "$2"; }

# cpu_ticks PID: the user and system CPU time so far, in clock ticks, of the process and
# of its children (Inlet's jq evaluator processes: running ones, and those it reaped).
cpu_ticks() {
  local own children
  own=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat")
  children=$(for stat in /proc/[0-9]*/stat; do awk -v p="$1" '$4 == p {print $14 + $15}' "$stat" 2>/dev/null; done | awk '{s += $1} END {print s + 0}')
  echo $((own + children))
}

# ingest BACKEND NAME CONFIG_ARG: accepted/s, p50, p99 of `inlet serve` (dispatcher off,
# configured by `config NAME URL false CONFIG_ARG`) loaded at concurrency 64 for DURATION
# on a fresh database, and the server's CPU time per accepted webhook in microseconds (its
# own work and its jq evaluators', whatever else the machine runs: the steadier figure on
# a small, shared machine). Call it in the script's own shell (not in `$(…)` or `< <(…)`): its server is
# then the one the exit trap stops.
ingest() {
  local url cfg out="$work/$1-$2.json" before after
  url=$(fresh "$1" "$2")
  cfg=$(config "$2" "$url" false "$3")
  serve "$cfg"
  before=$(cpu_ticks "$server")
  "$bin" bench --json --config "$cfg" --concurrency 64 --duration "$DURATION" >"$out"
  after=$(cpu_ticks "$server")
  stop
  echo "$(field "$out" accepted_per_sec) $(field "$out" latency_ms p50) $(field "$out" latency_ms p99)" \
    "$(python3 -c "import os,sys; print(round((int(sys.argv[2]) - int(sys.argv[1])) / os.sysconf('SC_CLK_TCK') * 1e6 / max(int(sys.argv[3]), 1)))" "$before" "$after" "$(field "$out" accepted)")"
}

# drain BACKEND NAME FILLED_URL CONFIG_ARG: delivered, seconds and deliveries/s of `inlet
# deliver --once` (configured by `config NAME URL true CONFIG_ARG`) on a copy of the
# filled database (PostgreSQL: the database ${db}_fill, as a template).
drain() {
  local url cfg started seconds delivered
  case $1 in
    postgres)
      psql "$PG_ADMIN" -qc "CREATE DATABASE ${db}_$2 TEMPLATE ${db}_fill"
      url="${PG_ADMIN%/*}/${db}_$2" ;;
    sqlite) cp "${3#sqlite://}" "$work/$2.db"; url="sqlite://$work/$2.db" ;;
  esac
  cfg=$(config "$2" "$url" true "$4")
  started=$(date +%s.%N)
  "$bin" deliver --once --config "$cfg" >"$work/deliver-$1-$2.log" 2>&1
  seconds=$(python3 -c "import sys,time; print(time.time() - float(sys.argv[1]))" "$started")
  delivered=$(sql "$1" "$url" "SELECT count(*) FROM deliveries WHERE status = 'delivered'")
  [ "$delivered" != 0 ] || { tail -5 "$work/deliver-$1-$2.log" >&2; echo "nothing delivered ($1, $2)" >&2; exit 1; }
  python3 -c "import sys; d, s = int(sys.argv[1]), float(sys.argv[2]); print(f'{d} {s:.2f} {d / s:.0f}')" "$delivered" "$seconds"
}
