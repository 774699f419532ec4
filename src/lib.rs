//! intake: a self-hosted data-intake API in one binary.
//!
//! # Codemap
//!
//! Data flow of a write: HTTP request → `api` (route, authorise, validate) → `records` (the
//! data operation) → `ingest` (queue; one writer thread commits batches with fsync, applying
//! each write to the record tables and appending it to the change log in the same commit) →
//! 202. The same commit stores the write's webhook deliveries (`webhooks::deliveries`); after
//! it the webhook dispatcher (`webhooks::dispatch`) is woken and sends them, and the search
//! indexer (`workers::search`) follows the change log into the tantivy index. Reads go `api` → `records` → `storage` directly; searches go `api` →
//! `search`, which joins the index with the unindexed tail of the change log and verifies
//! every hit in `storage`; polls go `api` → `poll`, which only shows records below the
//! visibility bound of the creates still in flight. `retention` deletes expired records
//! through the same change log.
//!
//! Management calls go `api` (token or session cookie → account) → a service module
//! (`endpoints`, `collaborators`, `deploy`, `accounts`...), which changes the store in one
//! transaction together with its audit entry, notifications and outbox e-mails, then clears the
//! key cache (`endpoints`) so data calls see the change at once.
//!
//! - [`cli`]: the command line (`serve` and its signals, `init`, `check`, `backup`,
//!   `restore`, `endpoint`); `--version` carries the commit and build from `build.rs`.
//! - [`log_output`]: where log lines go: a background thread writes them to stderr, so a
//!   request never waits on a `write` of its log line.
//! - [`config`]: the TOML file, defaults, duration syntax, `INTAKE_*` environment overrides,
//!   and the masked TOML printout of `intake check`.
//! - [`server`]: opens the data dir, starts the workers, accepts connections (hyper-util over a
//!   warp service), graceful shutdown in durability-safe order.
//! - [`app`]: the shared state handed to every request.
//! - [`api`]: HTTP: one warp filter, the route table, thin handlers, and the single mapping
//!   from service errors to statuses and error codes (`api::error`).
//! - [`dashboard`]: the server-rendered dashboard at `/dashboard` (and the invitation pages
//!   at `/invitations/{token}`): its own router, session and CSRF-checked forms, security
//!   headers, askama templates (`templates/dashboard/`), embedded assets, the first-run setup
//!   link; pages call the same service functions as the management API. Each endpoint's API
//!   test page (`dashboard::testpage`) is built from its `openapi::endpoint_document`.
//! - [`records`]: create / read / list / replace / delete; payload validation (stored as sent:
//!   only whitespace and string escapes normalised, numbers untouched) and required-field
//!   rules; `RecordsBody`, the one writer of record JSON (get, list, search, poll), which
//!   copies stored payload text into the response without parsing it again.
//! - [`ingest`]: the write queue and group-commit writer: a 202 leaves only after its write is
//!   durable.
//! - [`search`]: substring search: query rules, the exact-results algorithm and its planner
//!   (index or newest-first store walk), the allocation-free substring test
//!   (`search::matcher`), case folding and the positional trigram tokenizer, and the index
//!   as the planner reads it (`search::index`). The tantivy index, its indexer thread (at a
//!   lower CPU priority, `[search] indexer_nice`) and the per-snapshot view (searcher plus
//!   each segment's id columns) that queries read are a worker (`workers::search`).
//! - [`poll`]: the oldest-first feed, the in-flight registry that keeps it gap-free, and the
//!   read-ahead that warms the cache with a draining consumer's next page.
//! - [`retention`]: the scheduled purge of records past their environment's retention.
//! - [`endpoints`]: endpoints, their keys, who may see them (owner, collaborators), and
//!   authorising a data call's key with its permissions (cached until the next change).
//! - [`collaborators`]: invitations, accepting them, collaboration keys and permissions.
//! - [`deploy`]: the deploy workflow: requests, approval, rejection, direct deploy.
//! - [`accounts`]: the owner and member accounts, personal API tokens, suspension.
//! - [`sessions`]: dashboard login, session cookies, and the failed-login limit.
//! - [`notifications`]: stored notifications per account (deployed, deploy requested...).
//! - [`audit`]: the per-endpoint audit log of every change.
//! - [`usage`]: monthly data-call counters and the quota (429), and per-day counts for the
//!   dashboard's chart.
//! - [`mail`]: the outbox of e-mails and the worker that sends them over SMTP: a message is
//!   queued in the transaction of the change that causes it (`mail::enqueue`), the caller
//!   wakes the `Mailer` after the commit, and the mail thread (`mail::worker`) sends due
//!   messages with lettre (`mail::smtp`), writing each outcome and the retry schedule back on
//!   the row; without `[smtp]` messages stay queued.
//! - [`webhooks`]: owner and caller webhooks: deliveries made in the commit of their write
//!   (`deliveries`), the owner's settings (`owner`), the dispatcher (`dispatch`: a scheduler,
//!   a worker pool capped per receiver, the retry policy, group-committed attempt outcomes
//!   and the owner failure e-mail), one HTTP attempt with the SSRF guard (`send`), the
//!   delivery log and redelivery (`log`), the explicit outbound proxy (`proxy`), the Standard Webhooks signature (`signing`) and
//!   each endpoint's per-environment signing secrets with their 24-hour changeover
//!   (`secrets`).
//! - [`request_log`]: the per-endpoint log of data calls, batched and purged by retention.
//! - [`storage`]: the redb schema: every table and row type, in one place.
//! - [`cursor`]: opaque, partition-checked pagination cursors and the `limit` rule.
//! - [`crypto`]: hashes for key lookup, sealing of viewable keys, password hashing.
//! - [`ids`]: record ids, slugs, keys, tokens, request ids.
//! - [`clock`]: the injectable clock and the RFC 3339 format.
//! - [`ticker`]: the beat of the server's periodic tasks, ending when the server stops.
//! - [`private_dir`]: folders only their owner may read (data dir, backups).
//! - [`quiet_panic`]: runs code whose panic becomes an error (redb panics on some damaged
//!   pages; `storage` turns that into "restore a backup" at start).
//! - [`health`]: the readiness checks of `GET /readyz` and the gauges `GET /metrics` reads
//!   from the live server.
//! - [`tls`]: HTTPS: rustls server config, certificate reload (SIGHUP), the self-signed
//!   development certificate.
//! - [`redirect`]: the plain-HTTP listener that only redirects to `public_url`.
//! - [`first_byte`]: the deadline for a new connection's first byte (slow and silent
//!   clients; `server` also bounds headers, bodies and the number of connections).
//! - [`forwarded`]: the client's address of a request: the TCP peer, or behind trusted
//!   reverse proxies (`[http] trusted_proxies`) the address they forwarded; the login limits
//!   count by it.
//! - [`backup`]: backup archives (a redb snapshot copied table by table from one read
//!   transaction, the key-encryption key, a manifest), SIGUSR1 backups with rotation, and
//!   restoring into a stopped server's data dir; taken through `POST /api/v1/manage/backups`.
//! - [`notify`]: systemd readiness notifications (`READY=1`, `RELOADING=1`, `STOPPING=1`).
//! - [`metrics`]: counters and histograms kept while running (requests, searches, write
//!   batches, webhook outcomes) and the Prometheus text rendering.
//! - [`error`]: the service-layer error type.
//! - [`openapi`]: the OpenAPI 3.1 document of the whole API, built from one declaration per
//!   operation (`openapi::operations`), with each endpoint's own data-API document and the
//!   curl / JavaScript / Python code samples of its seven data operations (`openapi::examples`);
//!   served by `api::docs`. `tests/openapi.rs` holds it to the route table and the real answers.
//!
//! # Invariants
//!
//! - A write is acknowledged (202) only after the redb commit containing it has returned.
//! - The search index is derived data: every index commit records the change-log position it
//!   covers, and search never returns a record that the store does not confirm.
//! - Sandbox and production data live in different partitions and never mix.
//! - No plain API key, token, session or password is stored or logged; keys, tokens and
//!   sessions are found by SHA-256. Secrets that must be shown again (API keys, webhook
//!   signing secrets, receivers' auth values) are stored only sealed, and never logged or
//!   written to the audit log.
//! - Every change to endpoints, keys, collaborators or accounts clears the key cache after its
//!   commit, so a revoked key or permission stops working on the next call.
//! - A webhook delivery is stored in the commit of its write and its state and next attempt
//!   time live in redb; a dispatcher claim is only in memory, so after a restart every
//!   unfinished delivery is due again at its stored time (at least once, never early).
//! - Every dashboard form post is checked for its CSRF token (HMAC of the session, or of the
//!   visitor cookie before login) before anything is read or changed.
//! - A backup holds every write acknowledged before it began: it is one read transaction of
//!   the store, copied table by table over the single table list (`storage`) that creating
//!   the store follows too.
//! - A refused request changes nothing: validation happens before the write is queued, and a
//!   failed commit acknowledges nothing.

pub mod cli;
pub mod core;
pub mod domain;
pub mod http;
pub mod ops;
pub mod server;
pub mod store;
pub mod workers;
