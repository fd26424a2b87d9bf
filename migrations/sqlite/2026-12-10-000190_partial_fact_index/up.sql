-- The index diet (issue 53): events_fact_idx serves the console's lookup by fact key and
-- the events of one fact. Where the fact is the event itself (no fact rule: fact_key is the
-- event id, most events), the UNIQUE (source, event_id) index answers those lookups
-- already, so the index keeps only the events whose fact key differs: one random-key
-- index entry less per such webhook. The queries name the predicate
-- (src/operator/views.rs) so that both planners can use the partial index.
DROP INDEX events_fact_idx;
CREATE INDEX events_fact_idx ON events (source, fact_key) WHERE fact_key <> event_id;
