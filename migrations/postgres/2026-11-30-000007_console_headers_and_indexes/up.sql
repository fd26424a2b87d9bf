-- The request headers as received (JSON: [[name, value], …]), credentials redacted,
-- shown by the console and the operator API.
ALTER TABLE events ADD COLUMN headers TEXT;
-- The console lists a source's events newest first, finds events by fact key and
-- shows every event of a fact.
CREATE INDEX events_source_id_idx ON events (source, id);
CREATE INDEX events_fact_idx ON events (source, fact_key);
