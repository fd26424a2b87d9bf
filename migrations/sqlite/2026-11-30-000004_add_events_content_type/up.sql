-- The request's content type, passed on to destinations again on a replay.
ALTER TABLE events ADD COLUMN content_type TEXT;
