-- Password reset links (`store::accounts`), keyed by the SHA-256 of their token: at most one
-- per account, used once, for 30 minutes.
CREATE TABLE password_resets (
    hash bytea PRIMARY KEY,
    account_id bigint NOT NULL,
    data bytea NOT NULL
);
CREATE INDEX password_resets_by_account ON password_resets (account_id);
