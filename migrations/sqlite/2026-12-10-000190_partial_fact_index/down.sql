DROP INDEX events_fact_idx;
CREATE INDEX events_fact_idx ON events (source, fact_key);
