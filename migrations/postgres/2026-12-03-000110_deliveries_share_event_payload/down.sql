UPDATE deliveries d SET payload = e.payload
  FROM events e
 WHERE d.payload IS NULL AND e.source = d.source AND e.event_id = d.event_id;
-- A row that may still be sent but whose bytes are gone is a dead letter, never an empty
-- body sent as if it were the webhook's; a delivered one is never sent again.
UPDATE deliveries
   SET status = 'dead', settled_at = COALESCE(settled_at, now() AT TIME ZONE 'UTC'),
       last_error = 'the payload is gone: neither the delivery nor its event held it when the schema was downgraded'
 WHERE payload IS NULL AND status <> 'delivered';
UPDATE deliveries SET payload = '\x'::bytea WHERE payload IS NULL;
ALTER TABLE deliveries ALTER COLUMN payload SET NOT NULL;
