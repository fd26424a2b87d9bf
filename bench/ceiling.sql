-- pgbench script: the statements of one accepted webhook, the rows Inlet's ingest
-- transaction writes, and nothing else: claim the event with a 1 KiB payload, its request
-- headers and the answer it gets; record its fact; enqueue one delivery (referring to the
-- event's payload, no copy). One webhook per transaction: the per-transaction ceiling.
-- Run by bench/run.sh:
--   pgbench -n -M prepared -f bench/ceiling.sql -c 16 -j 2 -T 10 <database>
\set n random(1, 1000000000000)
BEGIN;
INSERT INTO events (source, event_id, event_type, fingerprint, status, fact_kind, fact_key,
                    payload, received_at, expires_at, content_type, headers, response_status,
                    response_content_type, response_body)
VALUES ('bench', 'pgb_' || :client_id || '_' || :n, 'bench.event',
        '3f1a5e0c4b7d9e2f8a6c1b0d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f', 'processed',
        'bench.event', 'pgb_' || :client_id || '_' || :n, convert_to(repeat('x', 1024), 'UTF8'),
        now(), now() + interval '35 days', 'application/json',
        '[["host","127.0.0.1:18080"],["content-type","application/json"],["content-length","1024"],["stripe-signature","t=1764748800,v1=9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c1b3d5f7e9a1c3b5d7f9e1a3c5b7d9f1e"]]',
        200, 'application/json',
        convert_to('{"outcome":"accepted","source":"bench","event_id":"pgb_' || :client_id || '_' || :n || '","fact":{"kind":"bench.event","key":"pgb_' || :client_id || '_' || :n || '","first_event_id":"pgb_' || :client_id || '_' || :n || '"}}', 'UTF8'))
ON CONFLICT (source, event_id) DO NOTHING RETURNING id;
INSERT INTO facts (source, kind, fact_key, first_event_id, created_at)
VALUES ('bench', 'bench.event', 'pgb_' || :client_id || '_' || :n, 'pgb_' || :client_id || '_' || :n, now())
ON CONFLICT (source, kind, fact_key) DO NOTHING RETURNING id;
INSERT INTO deliveries (source, event_id, event_type, destination, content_type, status,
                        attempt, next_attempt_at, deadline_at, created_at)
VALUES ('bench', 'pgb_' || :client_id || '_' || :n, 'bench.event', 'app', 'application/json',
        'pending', 0, now(), now() + interval '3 days', now());
COMMIT;
