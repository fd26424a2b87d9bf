-- Bulk operator actions by filter (replay, requeue, discard): created by one call under
-- its Idempotency-Key, then worked through in batches in id order by whichever instance
-- holds the lease. Each batch's effect and the cursor's advance commit together, so a
-- restart resumes after the last whole batch and no row is acted on twice.
CREATE TABLE bulk_actions (
    id BIGSERIAL PRIMARY KEY,
    action TEXT NOT NULL,               -- replay, requeue or discard
    filter TEXT NOT NULL,               -- the selection, as JSON
    operator TEXT NOT NULL,             -- who asked
    status TEXT NOT NULL,               -- running, done or failed
    upper_id BIGINT NOT NULL,           -- the newest row when it was created: later rows are left out
    cursor_id BIGINT NOT NULL,          -- every matching row up to this id is done
    matched BIGINT NOT NULL,            -- rows that matched when it was created
    processed BIGINT NOT NULL,          -- rows acted on so far
    results TEXT NOT NULL,              -- counts by result and deliveries by destination, JSON
    error TEXT,                         -- why its last batch failed, or why it failed
    failures INTEGER NOT NULL DEFAULT 0, -- batches failed in a row (at 5 it is failed)
    lease_holder TEXT,
    locked_until TIMESTAMP,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP
);
CREATE INDEX bulk_actions_status_idx ON bulk_actions (status, id);
-- The console's events list filters by type through an index, newest first.
CREATE INDEX events_type_idx ON events (event_type, id);
-- The Sources page reads each destination's attempts of the last hour (latency, success).
CREATE INDEX delivery_attempts_started_idx ON delivery_attempts (started_at);
