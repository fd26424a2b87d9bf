DROP INDEX facts_first_event_idx;
