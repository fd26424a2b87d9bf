-- The operator a console session was opened by (NULL for sessions opened before this
-- column): a reload or a restart that removes an operator ends their sessions' rows at
-- once, instead of leaving them until they expire.
ALTER TABLE console_sessions ADD COLUMN operator TEXT;
