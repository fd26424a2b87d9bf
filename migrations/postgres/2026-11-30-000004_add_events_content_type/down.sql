ALTER TABLE events DROP COLUMN content_type;
