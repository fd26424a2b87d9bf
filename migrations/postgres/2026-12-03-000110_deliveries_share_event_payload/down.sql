UPDATE deliveries d SET payload = e.payload
  FROM events e
 WHERE d.payload IS NULL AND e.source = d.source AND e.event_id = d.event_id;
UPDATE deliveries SET payload = '\x'::bytea WHERE payload IS NULL;
ALTER TABLE deliveries ALTER COLUMN payload SET NOT NULL;
