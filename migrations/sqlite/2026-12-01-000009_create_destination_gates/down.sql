DROP INDEX deliveries_destination_due_idx;
DROP TABLE destination_gates;
