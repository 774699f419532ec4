-- Erasure requests (`store::erasures`): the row as JSON, with the columns their reads select by.
CREATE SEQUENCE erasure_ids;
CREATE TABLE erasures (
    id bigint PRIMARY KEY,
    endpoint_id bigint NOT NULL,
    running boolean NOT NULL,
    created_at bigint NOT NULL,
    data bytea NOT NULL
);
CREATE INDEX erasures_by_endpoint ON erasures (endpoint_id, id);
CREATE INDEX erasures_running ON erasures (id) WHERE running;
