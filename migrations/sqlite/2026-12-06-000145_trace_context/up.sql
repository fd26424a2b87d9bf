-- OpenTelemetry: the W3C `traceparent` of the span that received a webhook, kept with its
-- event (shown on the console) and copied to its outbox rows, so that each delivery
-- attempt — leased later, by any instance — continues that trace and passes it on to the
-- application. NULL when tracing is off.
ALTER TABLE events ADD COLUMN trace_parent TEXT;
ALTER TABLE deliveries ADD COLUMN trace_parent TEXT;
