-- The change stream's event log (store::events): one row per applied create, replace and
-- delete, written in the ingest batch's transaction. An event's position is (xid, seq): the
-- id of the transaction that wrote it and its place in that transaction. Readers take only
-- events of transactions older than the oldest one still running, whose place in that order
-- no later commit can take.
CREATE TABLE record_events (
    partition bigint NOT NULL,
    xid bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
    seq bigint GENERATED ALWAYS AS IDENTITY,
    kind smallint NOT NULL,
    record_id bytea NOT NULL,
    at bigint NOT NULL,
    PRIMARY KEY (partition, xid, seq)
);

-- How far retention has purged each partition's events: positions at or below it may have
-- missed events.
CREATE TABLE record_event_trims (
    partition bigint PRIMARY KEY,
    xid bigint NOT NULL,
    seq bigint NOT NULL
);
