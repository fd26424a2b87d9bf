-- How an event arrived: NULL for a webhook (every row before this column), 'recovered'
-- for one fetched from its provider's own record by a reconciliation run.
ALTER TABLE events ADD COLUMN arrival TEXT;
-- Reconciliation runs, one row each: asked for (by an operator: status 'requested'),
-- running (the source's lease holder works through the provider's list page by page,
-- the cursor and the counts committed after each page, so a run whose instance died
-- continues from its last page), then ok or failed.
CREATE TABLE reconcile_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    trigger TEXT NOT NULL,              -- schedule, cli or api
    mode TEXT NOT NULL,                 -- recover or report
    status TEXT NOT NULL,               -- requested, running, ok or failed
    window_from TIMESTAMP NOT NULL,     -- events at or after this
    window_to TIMESTAMP NOT NULL,       -- and before this (now - settle when it started)
    cursor TEXT,                        -- the provider's page to continue from
    listed BIGINT NOT NULL DEFAULT 0,
    missing BIGINT NOT NULL DEFAULT 0,
    recovered BIGINT NOT NULL DEFAULT 0,
    errors BIGINT NOT NULL DEFAULT 0,
    missing_ids TEXT NOT NULL DEFAULT '[]', -- the first 1,000 event ids found missing, JSON
    error TEXT,
    requested_by TEXT,                  -- the operator who asked (api)
    started_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP
);
CREATE INDEX reconcile_runs_source_idx ON reconcile_runs (source, id);
-- One row per reconciled source: who holds its run lease (one run at a time across every
-- instance) and until when, and where the next scheduled run starts.
CREATE TABLE reconcile_sources (
    source TEXT PRIMARY KEY,
    lease_holder TEXT,
    locked_until TIMESTAMP,
    checked_until TIMESTAMP,            -- every event before this was found or recovered
    last_success_at TIMESTAMP
);
