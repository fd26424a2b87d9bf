-- One row per attempt at a delivery, written with its settlement (same transaction):
-- what the console shows for each delivery. Swept with its delivery.
CREATE TABLE delivery_attempts (
    id BIGSERIAL PRIMARY KEY,
    delivery_id BIGINT NOT NULL,
    attempt INTEGER NOT NULL,           -- the delivery's fencing token at the time
    outcome TEXT NOT NULL,              -- delivered | retry | dead
    status INTEGER,                     -- the destination's HTTP status, when it answered
    error TEXT,
    started_at TIMESTAMP NOT NULL,
    duration_ms BIGINT NOT NULL
);
CREATE INDEX delivery_attempts_delivery_idx ON delivery_attempts (delivery_id, attempt);
