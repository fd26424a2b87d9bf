-- A delivery whose destination's filter could not decide when its fact was recorded (a
-- bound hit, the evaluator died, every evaluator busy): it is written all the same —
-- dead with the reason, or pending when nothing was evaluated — never skipped, and its
-- filter is evaluated again when a dispatcher leases it (after a requeue, once the
-- filter is fixed): taken, it is sent; not taken, it is discarded.
ALTER TABLE deliveries ADD COLUMN filter_pending BOOLEAN NOT NULL DEFAULT FALSE;
-- Leases that sent nothing and gave the row back for later (its destination not
-- configured on that instance yet, its filter or transform not evaluated for want of an
-- evaluator): they bump the fencing token like any lease, but spend none of
-- max_attempts, which counts attempt - parked.
ALTER TABLE deliveries ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;
