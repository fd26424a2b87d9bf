-- Replay and the event view look facts up by the event that recorded them first.
CREATE INDEX facts_first_event_idx ON facts (source, first_event_id);
