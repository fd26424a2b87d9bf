#!/usr/bin/env bash
# What each table and index costs per accepted webhook on PostgreSQL (issue 53's index
# diet): the rows of one accepted webhook (bench/ceiling.sql — the event with its payload,
# headers and answer, its fact, its delivery) inserted by pgbench into a scratch database
# made by `inlet migrate`, first PREFILL webhooks so the indexes have a realistic depth,
# then a CHECKPOINT, then MEASURE webhooks whose write-ahead log pg_walinspect reads back
# and sums per relation: records, bytes and full-page-image bytes per webhook, each index
# on its own line, then the commit records and the total. Run it on a quiet machine;
# the figures go in docs/src/internals/storage.md.
#
#   bench/index-cost.sh          # BIN=target/debug/inlet PREFILL=200000 MEASURE=20000
#   PG_ADMIN=postgres://postgres@127.0.0.1:5432/postgres
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-target/debug/inlet}
admin=${PG_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
prefill=${PREFILL:-200000}
measure=${MEASURE:-20000}
clients=4
db="inlet_index_cost_$$"
url="${admin%/*}/$db"
work=$(mktemp -d)
cleanup() { psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true; rm -rf "$work"; }
trap cleanup EXIT

psql "$admin" -qc "CREATE DATABASE $db"
cat > "$work/inlet.toml" <<TOML
retired_sources = ["bench"]
[database]
url = "$url"
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["whsec_index_cost_0123456789abcdef0123456789"]
[[sources.destinations]]
url = "http://127.0.0.1:9/events"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
name = "app"
TOML
"$bin" migrate --config "$work/inlet.toml" >/dev/null
psql "$url" -qc "CREATE EXTENSION IF NOT EXISTS pg_walinspect"
run() { pgbench -n -M prepared -f bench/ceiling.sql -c "$clients" -j 2 -t $(($1 / clients)) "$url" >/dev/null; }
echo "prefill: $prefill webhooks"
run "$prefill"
psql "$url" -qc CHECKPOINT
start=$(psql "$url" -tAc 'SELECT pg_current_wal_lsn()')
echo "measured: $measure webhooks after a CHECKPOINT"
run "$measure"
psql "$url" -P footer=off -c "
  WITH r AS (
    SELECT xid, record_length, fpi_length, resource_manager, block_ref
    FROM pg_get_wal_records_info('$start', pg_current_wal_flush_lsn())),
  mine AS (SELECT '%/' || oid || '/%' AS pattern FROM pg_database WHERE datname = current_database()),
  per AS (
    SELECT CASE WHEN resource_manager = 'Transaction' THEN '(commit records)'
                ELSE coalesce(c.relname, 'relfilenode ' || m[1]) END AS relation,
           record_length, fpi_length
    FROM r CROSS JOIN mine
    LEFT JOIN LATERAL regexp_match(r.block_ref, 'rel [0-9]+/[0-9]+/([0-9]+)') m ON true
    LEFT JOIN pg_class c ON c.relfilenode = m[1]::oid
    WHERE r.block_ref LIKE mine.pattern OR r.resource_manager = 'Transaction')
  SELECT relation,
         round(count(*)::numeric / $measure, 2) AS records_per_webhook,
         round(sum(record_length)::numeric / $measure, 0) AS bytes_per_webhook,
         round(sum(fpi_length)::numeric / $measure, 0) AS fpi_bytes_per_webhook
  FROM per GROUP BY ROLLUP (relation)
  ORDER BY relation IS NULL, bytes_per_webhook DESC"
echo "(the last line, with no relation, is the total per webhook)"
