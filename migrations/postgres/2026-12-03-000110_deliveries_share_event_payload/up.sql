-- One copy of each payload: a delivery's payload is NULL while its event's row holds the
-- bytes (deliveries.source, deliveries.event_id → events), and the dispatcher reads them
-- from there. The sweeper copies them into every delivery row still referring to an event
-- it deletes, in the same transaction, so no delivery ever loses its body. Rows written
-- before keep their own copy (nothing is rewritten here).
ALTER TABLE deliveries ALTER COLUMN payload DROP NOT NULL;
