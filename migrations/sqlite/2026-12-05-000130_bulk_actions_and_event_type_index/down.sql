DROP INDEX delivery_attempts_started_idx;
DROP INDEX events_type_idx;
DROP INDEX bulk_actions_status_idx;
DROP TABLE bulk_actions;
