-- The outbox: one row per (new fact, destination), written in the ingest transaction.
-- Self-contained (it carries the payload) so a dead letter outlives its event row.
CREATE TABLE deliveries (
    id BIGSERIAL PRIMARY KEY,
    source TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT,
    destination TEXT NOT NULL,
    payload BYTEA NOT NULL,
    content_type TEXT NOT NULL,
    status TEXT NOT NULL,               -- pending | in_progress | delivered | dead
    attempt INTEGER NOT NULL,           -- leases taken so far: the fencing token
    locked_until TIMESTAMP,             -- lease expiry while in_progress
    next_attempt_at TIMESTAMP NOT NULL,
    deadline_at TIMESTAMP NOT NULL,     -- no retry is scheduled past this
    created_at TIMESTAMP NOT NULL,
    delivered_at TIMESTAMP,
    last_status INTEGER,                -- the destination's last HTTP status
    last_error TEXT
);
CREATE INDEX deliveries_due_idx ON deliveries (status, next_attempt_at);
CREATE INDEX deliveries_event_idx ON deliveries (source, event_id);
