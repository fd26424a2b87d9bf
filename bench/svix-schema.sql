-- The tables a Svix-shaped webhook server writes per message, for bench/svix.sql: the
-- application looked up on every request, the message row (its payload left null: the body
-- lives in messagecontent) and the message content, with the indexes each write maintains.
-- Ids use the "C" collation, as Svix's schema does. Created by bench/run.sh in the scratch
-- database, in its own schema so it cannot touch Inlet's tables.
CREATE SCHEMA svix;

CREATE TABLE svix.application (
    id text COLLATE "C" PRIMARY KEY,
    org_id text COLLATE "C" NOT NULL,
    uid text COLLATE "C",
    name text NOT NULL,
    rate_limit integer,
    deleted boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE svix.message (
    id text COLLATE "C" PRIMARY KEY,
    created_at timestamptz NOT NULL,
    org_id text COLLATE "C" NOT NULL,
    app_id text COLLATE "C" NOT NULL,
    event_type text NOT NULL,
    uid text,
    payload jsonb,
    channels jsonb,
    expiration timestamptz NOT NULL
);
CREATE INDEX message_per_app ON svix.message (app_id, id DESC);
CREATE UNIQUE INDEX message_uid_per_app ON svix.message (app_id, uid) WHERE uid IS NOT NULL;
CREATE INDEX message_expiration_with_payload ON svix.message (expiration) WHERE payload IS NOT NULL;

CREATE TABLE svix.messagecontent (
    id text COLLATE "C" PRIMARY KEY,
    created_at timestamptz NOT NULL,
    payload bytea NOT NULL,
    expiration timestamptz NOT NULL
);
CREATE INDEX messagecontent_expiration ON svix.messagecontent (expiration);

INSERT INTO svix.application (id, org_id, uid, name)
VALUES ('app_bench', 'org_bench', 'bench', 'bench');
