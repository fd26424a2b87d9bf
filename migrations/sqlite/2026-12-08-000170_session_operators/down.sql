ALTER TABLE console_sessions DROP COLUMN operator;
