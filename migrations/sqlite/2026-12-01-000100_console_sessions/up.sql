-- Console sessions, shared by every Inlet instance on this database: one row per session
-- signed in, keyed by the sha256 of the session id its cookie carries (the database never
-- holds what a cookie holds). A cookie is accepted only while its row is open, so signing
-- out ends the session everywhere, a copied cookie included. A row is deleted once its
-- session has expired anyway.
CREATE TABLE console_sessions (
    id TEXT PRIMARY KEY,                -- hex sha256 of the cookie's session id
    created_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL,      -- the cookie's own expiry
    revoked_at TIMESTAMP                -- set at sign-out
);
CREATE INDEX console_sessions_expires_at_idx ON console_sessions (expires_at);
