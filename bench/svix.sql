-- pgbench script: what a Svix-shaped webhook server asks of PostgreSQL per message, for
-- comparison with Inlet (tables in bench/svix-schema.sql): look the application up by id
-- (its own implicit transaction), then one transaction inserting the message row (payload
-- null, uid = the sender's event id) and its content (a 1 KiB payload). Message ids grow
-- with time, like Svix's KSUIDs: now() is the transaction's start, so both inserts compute
-- the same id. Run by bench/run.sh:
--   pgbench -n -f bench/svix.sql -c 64 -j 2 -T 10 <database>
\set n random(1, 1000000000000)
SELECT id, org_id, uid, name, rate_limit, deleted FROM svix.application WHERE id = 'app_bench';
BEGIN;
INSERT INTO svix.message (id, created_at, org_id, app_id, event_type, uid, payload, channels,
                          expiration)
VALUES ('msg_' || to_char(now(), 'YYYYMMDDHH24MISSUS') || '_' || :client_id || '_' || :n, now(),
        'org_bench', 'app_bench', 'bench.event', 'evt_' || :client_id || '_' || :n, NULL, NULL,
        now() + interval '90 days');
INSERT INTO svix.messagecontent (id, created_at, payload, expiration)
VALUES ('msg_' || to_char(now(), 'YYYYMMDDHH24MISSUS') || '_' || :client_id || '_' || :n, now(),
        convert_to(repeat('x', 1024), 'UTF8'), now() + interval '90 days');
COMMIT;
