-- Secrets established by a provider's handshake (Asana's X-Hook-Secret), one per source,
-- shared by every instance. A handshake stores one only while its source has none
-- (INSERT … ON CONFLICT DO NOTHING on the primary key: of two racing, exactly one is
-- stored); only an operator's clear removes it. The value is never shown by the API.
CREATE TABLE hook_secrets (
    source TEXT PRIMARY KEY,
    secret TEXT NOT NULL,
    established_at TIMESTAMP NOT NULL
);
