-- The audit trail: one row per state-changing operator action (replay, requeue, discard,
-- reload, sign-in, sign-out) and per refusal for lack of role, written in the same
-- transaction as the action — an action whose row cannot be written does not happen.
-- No API deletes a row; the sweeper deletes rows older than retention.audit.
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TIMESTAMP NOT NULL,
    operator TEXT NOT NULL,             -- the operator's configured name
    role TEXT NOT NULL,                 -- viewer, operator or admin, at the time
    action TEXT NOT NULL,               -- replay, requeue, discard, reload, sign_in, sign_out
    outcome TEXT NOT NULL,              -- done, refused (lack of role) or failed
    parameters TEXT NOT NULL,           -- the request as JSON (at most 8 KiB, then cut)
    result TEXT NOT NULL,               -- a summary of what the action did
    idempotency_key TEXT,
    request_id TEXT,
    client TEXT,                        -- the client's address
    surface TEXT NOT NULL               -- api or console
);
CREATE INDEX audit_at_idx ON audit (at);
CREATE INDEX audit_operator_idx ON audit (operator, id);

-- Secrets the server generates once and every instance shares: the console's session
-- key (unless console.session_secret configures one).
CREATE TABLE server_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);
