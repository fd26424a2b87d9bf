DROP INDEX events_fact_idx;
DROP INDEX events_source_id_idx;
ALTER TABLE events DROP COLUMN headers;
