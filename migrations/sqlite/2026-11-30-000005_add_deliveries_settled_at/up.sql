-- When a delivery became dead or was discarded: dead letters and discarded rows are kept
-- for retention.dead_letters from then, so an operator has that long to look at them.
-- Rows already dead get the migration time, so none disappears sooner than the window.
ALTER TABLE deliveries ADD COLUMN settled_at TIMESTAMP;
UPDATE deliveries SET settled_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE status = 'dead';
