-- intake's schema, version 1. Rows are the same JSON as on redb (`data`); the columns beside it
-- are what is looked up, ordered or claimed. u64 ids, partitions and microsecond times are
-- bigint; record ids are 16 big-endian bytes, so bytea order is created_at order.

CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE SEQUENCE account_ids;
CREATE SEQUENCE endpoint_ids;
CREATE SEQUENCE invitation_ids;
CREATE SEQUENCE notification_ids;
CREATE SEQUENCE audit_ids;
CREATE SEQUENCE mail_ids;
CREATE SEQUENCE delivery_ids;
CREATE SEQUENCE request_log_ids;

CREATE TABLE accounts (
    id bigint PRIMARY KEY,
    email text NOT NULL UNIQUE,
    data bytea NOT NULL
);

-- Personal tokens and dashboard sessions, keyed by the SHA-256 of their secret.
CREATE TABLE tokens (
    hash bytea PRIMARY KEY,
    account_id bigint NOT NULL,
    data bytea NOT NULL
);
CREATE INDEX tokens_by_account ON tokens (account_id);

CREATE TABLE sessions (
    hash bytea PRIMARY KEY,
    account_id bigint NOT NULL,
    expires_at bigint NOT NULL,
    data bytea NOT NULL
);
CREATE INDEX sessions_by_account ON sessions (account_id);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

CREATE TABLE notifications (
    account_id bigint NOT NULL,
    id bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (account_id, id)
);

CREATE TABLE endpoints (
    id bigint PRIMARY KEY,
    slug text NOT NULL UNIQUE,
    owner_id bigint NOT NULL,
    data bytea NOT NULL
);
CREATE INDEX endpoints_by_owner ON endpoints (owner_id);

CREATE TABLE api_keys (
    hash bytea PRIMARY KEY,
    endpoint_id bigint NOT NULL,
    data bytea NOT NULL
);

CREATE TABLE collaborators (
    endpoint_id bigint NOT NULL,
    account_id bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (endpoint_id, account_id)
);
CREATE INDEX collaborators_by_account ON collaborators (account_id);

CREATE TABLE invitations (
    id bigint PRIMARY KEY,
    endpoint_id bigint NOT NULL,
    token_hash bytea NOT NULL UNIQUE,
    data bytea NOT NULL
);
CREATE INDEX invitations_by_endpoint ON invitations (endpoint_id, id);

CREATE TABLE audit (
    endpoint_id bigint NOT NULL,
    id bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (endpoint_id, id)
);

-- Records: `folded` is the case-folded payload text search matches against (see
-- `domain::search`), trigram-indexed so that a substring query reads only candidates.
CREATE TABLE records (
    partition bigint NOT NULL,
    id bytea NOT NULL,
    updated_at bigint NOT NULL,
    payload bytea NOT NULL,
    folded text COLLATE "C" NOT NULL,
    PRIMARY KEY (partition, id)
);
CREATE INDEX records_folded ON records USING gin (folded gin_trgm_ops);

CREATE TABLE idempotency (
    partition bigint NOT NULL,
    key text NOT NULL,
    created_at bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (partition, key)
);
CREATE INDEX idempotency_by_age ON idempotency (created_at);

CREATE TABLE webhook_secrets (
    partition bigint PRIMARY KEY,
    data bytea NOT NULL
);

CREATE TABLE owner_webhooks (
    partition bigint PRIMARY KEY,
    data bytea NOT NULL
);

-- Webhook deliveries. A pending one has `due_at` (and `receiver`, `retry`); a node sending it
-- holds a lease on it (`lease_node`, `lease_until` on the database's clock).
CREATE TABLE deliveries (
    id bigint PRIMARY KEY,
    partition bigint NOT NULL,
    record_id bytea NOT NULL,
    due_at bigint,
    retry boolean NOT NULL DEFAULT false,
    receiver text NOT NULL DEFAULT '',
    lease_node bigint,
    lease_until timestamptz,
    data bytea NOT NULL
);
CREATE INDEX deliveries_due ON deliveries (due_at, id) WHERE due_at IS NOT NULL;
CREATE INDEX deliveries_by_partition ON deliveries (partition, id);
CREATE INDEX deliveries_by_record ON deliveries (partition, record_id, id);

CREATE TABLE delivery_attempts (
    delivery_id bigint NOT NULL,
    attempt integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);

-- The owner was e-mailed about a given-up delivery of this endpoint on this UTC day.
CREATE TABLE failure_mails (
    endpoint_id bigint NOT NULL,
    day bigint NOT NULL,
    PRIMARY KEY (endpoint_id, day)
);

-- The outbox. A node sending a message holds a lease on it.
CREATE TABLE outbox (
    id bigint PRIMARY KEY,
    status text NOT NULL,
    created_at bigint NOT NULL,
    lease_node bigint,
    lease_until timestamptz,
    data bytea NOT NULL
);
CREATE INDEX outbox_queued ON outbox (id) WHERE status = 'queued';
CREATE INDEX outbox_by_age ON outbox (created_at);

CREATE TABLE usage_months (
    partition bigint NOT NULL,
    month integer NOT NULL,
    calls bigint NOT NULL,
    PRIMARY KEY (partition, month)
);

CREATE TABLE usage_days (
    partition bigint NOT NULL,
    day integer NOT NULL,
    calls bigint NOT NULL,
    PRIMARY KEY (partition, day)
);

-- The request log: `seq` (from `request_log_ids`) orders a partition's entries of one time;
-- `status` is the response status a page filters on without decoding `data`.
CREATE TABLE request_log (
    partition bigint NOT NULL,
    time bigint NOT NULL,
    seq bigint NOT NULL,
    status integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (partition, time, seq)
);
CREATE INDEX request_log_by_time ON request_log (time);

-- The nodes of the cluster: each renews its lease and publishes the low-water mark of its
-- creates in flight (`domain::poll`), on the database's clock.
CREATE TABLE nodes (
    id bigserial PRIMARY KEY,
    name text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz NOT NULL,
    low_water bigint NOT NULL
);

-- Periodic jobs: a node runs one when it moves `next_run` (microseconds, on the injected
-- clock of the nodes, like every time the services keep) past now: once per period across the
-- cluster.
CREATE TABLE jobs (
    name text PRIMARY KEY,
    next_run bigint NOT NULL
);

-- Failed dashboard logins (`domain::sessions::LoginThrottle`), shared so that several nodes do
-- not multiply the limits: one row per failure, counted per (e-mail, address) while
-- `pair_counts`, and per address always, within the window.
CREATE TABLE login_failures (
    id bigserial PRIMARY KEY,
    email text NOT NULL,
    address text,
    at bigint NOT NULL,
    pair_counts boolean NOT NULL DEFAULT true
);
CREATE INDEX login_failures_by_pair ON login_failures (email, address, at);
CREATE INDEX login_failures_by_address ON login_failures (address, at);
CREATE INDEX login_failures_by_age ON login_failures (at);

-- Values every node shares, decided by the first to ask (`Store::shared_value`).
CREATE TABLE settings (
    name text PRIMARY KEY,
    value bytea NOT NULL
);

-- Shared counters: `access` is bumped by every change to who may call what, so every node
-- clears its access cache.
CREATE TABLE counters (
    name text PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO counters (name, value) VALUES ('access', 0);
