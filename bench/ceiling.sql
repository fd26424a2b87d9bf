-- pgbench script: the statements of one accepted webhook, exactly what Inlet's ingest
-- transaction does, and nothing else: claim the event with a 1 KiB payload, record its
-- fact, enqueue one delivery, store the response. Run by bench/run.sh:
--   pgbench -n -f bench/ceiling.sql -c 16 -j 2 -T 10 <database>
\set n random(1, 1000000000000)
BEGIN;
INSERT INTO events (source, event_id, event_type, fingerprint, status, fact_kind, fact_key,
                    payload, received_at, expires_at, content_type)
VALUES ('bench', 'pgb_' || :client_id || '_' || :n, 'bench.event',
        '3f1a5e0c4b7d9e2f8a6c1b0d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f', 'processed',
        'bench.event', 'pgb_' || :client_id || '_' || :n, convert_to(repeat('x', 1024), 'UTF8'),
        now(), now() + interval '35 days', 'application/json')
ON CONFLICT (source, event_id) DO NOTHING RETURNING id;
INSERT INTO facts (source, kind, fact_key, first_event_id, created_at)
VALUES ('bench', 'bench.event', 'pgb_' || :client_id || '_' || :n, 'pgb_' || :client_id || '_' || :n, now())
ON CONFLICT (source, kind, fact_key) DO NOTHING RETURNING id;
INSERT INTO deliveries (source, event_id, event_type, destination, payload, content_type, status,
                        attempt, next_attempt_at, deadline_at, created_at)
VALUES ('bench', 'pgb_' || :client_id || '_' || :n, 'bench.event', 'app',
        convert_to(repeat('x', 1024), 'UTF8'), 'application/json', 'pending', 0, now(),
        now() + interval '3 days', now());
UPDATE events SET response_status = 200, response_content_type = 'application/json',
       response_body = convert_to('{"outcome":"accepted","source":"bench","event_id":"pgb","fact":{"kind":"bench.event","key":"pgb","first_event_id":"pgb"}}', 'UTF8')
WHERE source = 'bench' AND event_id = 'pgb_' || :client_id || '_' || :n;
COMMIT;
