-- The inbox and dedupe record: one row per (source, provider event id).
CREATE TABLE events (
    id BIGSERIAL PRIMARY KEY,
    source TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT,
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL,
    fact_kind TEXT NOT NULL,
    fact_key TEXT NOT NULL,
    payload BYTEA NOT NULL,
    response_status INTEGER,
    response_content_type TEXT,
    response_body BYTEA,
    received_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    CONSTRAINT events_source_event_id_key UNIQUE (source, event_id)
);
CREATE INDEX events_expires_at_idx ON events (expires_at);
CREATE INDEX events_received_at_idx ON events (received_at, id);

-- The ledger: one row per real-world fact, forever.
CREATE TABLE facts (
    id BIGSERIAL PRIMARY KEY,
    source TEXT NOT NULL,
    kind TEXT NOT NULL,
    fact_key TEXT NOT NULL,
    first_event_id TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    CONSTRAINT facts_source_kind_fact_key_key UNIQUE (source, kind, fact_key)
);
