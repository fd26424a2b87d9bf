ALTER TABLE deliveries DROP COLUMN parked;
ALTER TABLE deliveries DROP COLUMN filter_pending;
