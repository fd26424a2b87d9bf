DROP TABLE facts;
DROP TABLE events;
