DROP INDEX console_sessions_expires_at_idx;
DROP TABLE console_sessions;
