DROP TABLE reconcile_sources;
DROP TABLE reconcile_runs;
ALTER TABLE events DROP COLUMN arrival;
