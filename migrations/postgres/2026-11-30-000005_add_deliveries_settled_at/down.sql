ALTER TABLE deliveries DROP COLUMN settled_at;
