-- The operator API's Idempotency-Key store: one row per (caller, key), written in the same
-- transaction as the call's effect, with the response replayed to every retry.
CREATE TABLE operator_requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    caller TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,          -- sha256 of method, path and body
    status TEXT NOT NULL,               -- completed
    response_status INTEGER,
    response_body BLOB,
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    CONSTRAINT operator_requests_caller_key_key UNIQUE (caller, idempotency_key)
);
CREATE INDEX operator_requests_expires_at_idx ON operator_requests (expires_at);
