ALTER TABLE deliveries DROP COLUMN trace_parent;
ALTER TABLE events DROP COLUMN trace_parent;
