-- One row per destination, shared by every Inlet instance: its circuit breaker and its
-- rate limit's token bucket. Dispatchers lock a row while they lease for its destination
-- (PostgreSQL: FOR UPDATE; SQLite: the write lock) and update it when they settle.
CREATE TABLE destination_gates (
    source TEXT NOT NULL,
    destination TEXT NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0,    -- consecutive transient failures
    open_until TIMESTAMP,                   -- set while open; once past, one probe decides
    cooldown_ms BIGINT NOT NULL DEFAULT 0,  -- the last cool-down (doubles on each reopening)
    opened_at TIMESTAMP,                    -- when the breaker last opened
    tokens DOUBLE PRECISION NOT NULL DEFAULT 0,    -- the rate limit's bucket
    tokens_at TIMESTAMP,                    -- when the bucket was last counted (NULL: full)
    PRIMARY KEY (source, destination)
);

-- While a breaker or a limit holds a destination back, the others are leased one by one,
-- each on its own range: a held backlog is never read.
CREATE INDEX deliveries_destination_due_idx
    ON deliveries (source, destination, status, next_attempt_at);
