//! Upgrades keep every byte (#38).
//!
//! `tests/fixtures/upgrade/<release>/` holds the data a release wrote, for each backend: a
//! redb data dir (`redb/data/`: its files, the search index included) and a PostgreSQL
//! database as `pg_dump` wrote it (`postgres/intake.sql`, beside the data dir's `master.key`),
//! each with `manifest.json`: the credentials, the payloads as sent, and the answers that
//! release gave to a list of reads at the time `now`. [`write_fixture`] makes them with the
//! release's binary (`tests/fixtures/upgrade/README.md` says when). Every later build must
//! serve a copy of each, on a clock at its `now`, with the same answers byte for byte: records
//! with their numbers and text as sent, lists, poll, search, the change stream, deliveries in
//! every state with their attempts, subscriptions, signing secrets, collaborators, sessions,
//! tokens, the request log, audit and notifications; then take new writes, and keep a
//! replaced key working exactly until its grace period ends by the injected clock.
//!
//! A layout this build does not know is refused, never guessed at: a data dir or database
//! written by a newer intake stops `intake serve` (and `intake check`) with exit 1 and a
//! message naming both versions and the way back. A PostgreSQL database of the previous
//! migration set is migrated at start and serves the same answers. (redb's upgrade steps, the
//! copy taken before them, and an upgrade that fails or crashes half-way are tested beside
//! the code, `store/redb/layout.rs`, with a layout one version past this one.)

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::in_process::{InProcessServer, at};
use common::receiver::{Receiver, Reply};
use common::*;
use intake::core::clock::{Clock, SystemClock};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The config of the server that wrote the fixture and of every server that reads it: links
/// name one public URL whatever port a server listens on, webhooks go to loopback receivers,
/// and poll holds nothing back, so its answers depend on the clock alone.
const CONFIG: &str = "public_url = \"http://intake.example.com\"\n\
                      [webhooks]\nallow_private_targets = true\n\
                      [poll]\nhold_back = \"0s\"\n";

const COLLABORATOR_EMAIL: &str = "collaborator@example.com";
/// The grace period of the replaced sandbox key.
const GRACE_SECONDS: u64 = 3600;
const WAIT: Duration = Duration::from_secs(60);

/// The folder of every release's fixtures.
fn fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade")
}

fn backend_name() -> &'static str {
    if on_postgres() { "postgres" } else { "redb" }
}

/// The fixture of the backend under test of every release there is one of, oldest first:
/// `tests/fixtures/upgrade/<release>/<backend>`.
fn fixtures() -> Vec<PathBuf> {
    let root = fixtures_root();
    let mut releases: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let version = path
                .file_name()?
                .to_str()?
                .split('.')
                .map(|n| n.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            Some((version, path.join(backend_name())))
        })
        .collect();
    releases.sort();
    assert!(!releases.is_empty(), "no fixture in {}", root.display());
    releases.into_iter().map(|(_, path)| path).collect()
}

/// The newest release's fixture.
fn newest_fixture() -> PathBuf {
    fixtures().pop().expect("a fixture")
}

/// The name of the dump of the database in the PostgreSQL fixture.
const DUMP: &str = "intake.sql";
const MANIFEST: &str = "manifest.json";

/// What the fixture holds beside its data: who may read it and what the release answered.
#[derive(Serialize, Deserialize)]
struct Manifest {
    /// `intake --version` of the build that wrote the fixture.
    written_by: String,
    /// When the answers were given: the clock of every server that reads the fixture.
    now: String,
    owner: Member,
    collaborator: Member,
    slug: String,
    /// The caller of each kind → the key or token it sends.
    keys: BTreeMap<Caller, String>,
    /// Until when the replaced sandbox key works.
    previous_valid_until: String,
    /// Every record written, as sent (its last version for a replaced one), by id.
    records: BTreeMap<String, Written>,
    /// The record posted with [`IDEMPOTENCY_KEY`].
    idempotent: String,
    /// The change stream of the sandbox from its first event: that event's id, then the
    /// events after it as a resumed stream gives them.
    first_event_id: String,
    events: Vec<Value>,
    /// The request log of each environment, newest first, as the owner reads it.
    request_log: BTreeMap<String, Vec<Value>>,
    answers: Vec<Answer>,
}

#[derive(Clone, Serialize, Deserialize)]
struct Member {
    email: String,
    password: String,
    /// The `intake_session` cookie of a login.
    cookie: String,
}

/// Who makes a call of the fixture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Caller {
    /// The owner's token from `intake init`.
    Owner,
    /// The owner's personal token made with the management API.
    OwnerPersonalToken,
    OwnerSession,
    CollaboratorSession,
    /// The endpoint's sandbox key after the rotation, and the one it replaced.
    Sandbox,
    PreviousSandbox,
    Production,
    CollaboratorSandbox,
}

#[derive(Clone, Serialize, Deserialize)]
struct Written {
    environment: String,
    /// The payload as it went over the wire.
    sent: String,
    deleted: bool,
}

impl Written {
    /// The endpoint's key of the record's environment.
    fn reader(&self) -> Caller {
        if self.environment == "production" {
            Caller::Production
        } else {
            Caller::Sandbox
        }
    }
}

/// One GET and what the release answered.
#[derive(Clone, Serialize, Deserialize)]
struct Answer {
    caller: Caller,
    path: String,
    status: u16,
    body: String,
}

const IDEMPOTENCY_KEY: &str = "fixture-idempotency-1";

fn manifest(fixture: &Path) -> Manifest {
    let path = fixture.join(MANIFEST);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The credentials a call of `caller` sends.
fn credentials(m: &Manifest, caller: Caller) -> (&'static str, String) {
    match caller {
        Caller::OwnerSession => ("Cookie", format!("intake_session={}", m.owner.cookie)),
        Caller::CollaboratorSession => (
            "Cookie",
            format!("intake_session={}", m.collaborator.cookie),
        ),
        other => ("Authorization", format!("Bearer {}", m.keys[&other])),
    }
}

fn get_as(s: &ServerClient, m: &Manifest, caller: Caller, path: &str) -> Resp {
    let (name, value) = credentials(m, caller);
    s.request("GET", path, &[(name, value.as_str())], None)
}

/// The reads whose answers the fixture keeps: everything a caller can see of the data.
fn reads(m: &Manifest, deliveries: &[String]) -> Vec<(Caller, String)> {
    let slug = &m.slug;
    let manage = format!("/api/v1/manage/endpoints/{slug}");
    let data = format!("/api/v1/data/{slug}");
    let mut reads: Vec<(Caller, String)> = [
        "/api/v1/manage/endpoints".to_string(),
        manage.clone(),
        format!("{manage}/audit"),
        format!("{manage}/collaborators"),
        format!("{manage}/invitations"),
        format!("{manage}/webhooks/sandbox/subscriptions"),
        format!("{manage}/webhooks/production/subscriptions"),
        format!("{manage}/webhook-secrets/sandbox"),
        format!("{manage}/webhook-secrets/production"),
        format!("{manage}/deliveries?environment=sandbox&limit=100"),
        format!("{manage}/deliveries?environment=production&limit=100"),
        "/api/v1/manage/account".to_string(),
        "/api/v1/manage/accounts".to_string(),
        "/api/v1/manage/tokens".to_string(),
        "/api/v1/manage/notifications".to_string(),
        "/api/v1/manage/mail".to_string(),
    ]
    .into_iter()
    .map(|path| (Caller::Owner, path))
    .collect();
    for id in deliveries {
        reads.push((Caller::Owner, format!("{manage}/deliveries/{id}")));
    }
    reads.extend([
        (Caller::OwnerPersonalToken, "/api/v1/manage/account".into()),
        (Caller::OwnerSession, "/api/v1/auth/session".into()),
        (Caller::OwnerSession, "/api/v1/manage/endpoints".into()),
        (Caller::CollaboratorSession, "/api/v1/auth/session".into()),
        (Caller::CollaboratorSession, manage.clone()),
        (
            Caller::CollaboratorSession,
            format!("{manage}/deliveries?environment=sandbox&limit=100"),
        ),
        (
            Caller::CollaboratorSession,
            "/api/v1/manage/notifications".into(),
        ),
    ]);
    for (id, written) in &m.records {
        reads.push((written.reader(), format!("{data}/{id}")));
    }
    for query in ["limit=30", "limit=2"] {
        reads.push((Caller::Sandbox, format!("{data}?{query}")));
    }
    reads.extend([
        (Caller::PreviousSandbox, format!("{data}?limit=30")),
        (Caller::CollaboratorSandbox, format!("{data}?limit=30")),
        (Caller::Production, format!("{data}?limit=30")),
        (
            Caller::Sandbox,
            format!("{data}/poll?since=1970-01-01&limit=100"),
        ),
        (
            Caller::Production,
            format!("{data}/poll?since=1970-01-01&limit=100"),
        ),
    ]);
    for q in [
        "zürich",
        "123456789012345678901234567890",
        "日本語",
        "after ✓",
        "98765432109876543210987654321.000000000000000000001",
    ] {
        reads.push((
            Caller::Sandbox,
            format!("{data}/search?q={}&limit=30", url_encode(q)),
        ));
    }
    reads.push((
        Caller::Production,
        format!("{data}/search?q={}&limit=30", url_encode("production ✓")),
    ));
    reads
}

/// The ids of the deliveries an owner's listing of `environment` shows.
fn delivery_ids(s: &ServerClient, m: &Manifest, environment: &str) -> Vec<String> {
    deliveries(s, m, environment)
        .iter()
        .map(|d| d["id"].as_u64().expect("delivery id").to_string())
        .collect()
}

fn deliveries(s: &ServerClient, m: &Manifest, environment: &str) -> Vec<Value> {
    let r = get_as(
        s,
        m,
        Caller::Owner,
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries?environment={environment}&limit=100",
            m.slug
        ),
    );
    assert_status(&r, 200);
    r.json()["data"].as_array().expect("deliveries").clone()
}

/// The whole request log of `environment`, newest first, as the owner reads it: the entries
/// before `before` (RFC 3339, compared as text: every time is written alike).
fn request_log_before(
    s: &ServerClient,
    m: &Manifest,
    environment: &str,
    before: &str,
) -> Vec<Value> {
    let mut entries = Vec::new();
    let first = format!("environment={environment}&limit=100");
    let mut query = first.clone();
    loop {
        let r = get_as(
            s,
            m,
            Caller::Owner,
            &format!("/api/v1/manage/endpoints/{}/requests?{query}", m.slug),
        );
        assert_status(&r, 200);
        let page = r.json();
        entries.extend(
            page["data"]
                .as_array()
                .expect("request log")
                .iter()
                .filter(|e| e["time"].as_str().is_some_and(|t| t < before))
                .cloned(),
        );
        match page
            .pointer("/pagination/next_cursor")
            .and_then(Value::as_str)
        {
            Some(cursor) => query = format!("{first}&cursor={}", url_encode(cursor)),
            None => return entries,
        }
    }
}

/// The sandbox's change stream resumed after `first`: the `count` events that follow.
fn events_after(s: &ServerClient, m: &Manifest, first: &str, count: usize) -> Vec<Value> {
    let key = &m.keys[&Caller::Sandbox];
    let mut reader = common::sse::open(s.addr(), &m.slug, key, Some(first), "")
        .unwrap_or_else(|r| panic!("the stream was refused: {}", r.describe()));
    (0..count)
        .map(|_| {
            let event = reader.next().expect("an event of the stored stream");
            json!({"id": event.id, "event": event.kind, "data": event.data})
        })
        .collect()
}

/// `value` with every number as the nearest f64: the manifests of releases whose tests read
/// JSON numbers as f64 hold events that way (the payloads' exact text is compared through the
/// record reads of `check_same_answers`).
fn numbers_as_f64(value: &Value) -> Value {
    match value {
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| value.clone(), Value::Number),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_f64).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), numbers_as_f64(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------
// Reading the fixture
// ---------------------------------------------------------------------------

/// A copy of the data dir of `fixture` in `dir/data`; on PostgreSQL, with a new database
/// holding the fixture's.
fn copy_fixture(fixture: &Path, dir: &Path) {
    let data = dir.join("data");
    copy_tree(&fixture.join("data"), &data);
    if on_postgres() {
        use_database(&data, postgres::shared().restore(&dump_of(fixture)));
    }
}

/// The `pg_dump` of a PostgreSQL fixture.
fn dump_of(fixture: &Path) -> Vec<u8> {
    let path = fixture.join(DUMP);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The server on a copy of the fixture (`prepare` readies it), with the clock at the
/// fixture's `now`.
fn serve_fixture(m: &Manifest, dir: tempfile::TempDir) -> InProcessServer {
    let owner = InitOutput {
        password: m.owner.password.clone(),
        token: m.keys[&Caller::Owner].clone(),
    };
    InProcessServer::start_on(dir, CONFIG, at(&m.now), &owner)
}

/// The files of the search index's last commit (`meta.json`), which a rebuild rewrites.
fn index_commit(data_dir: &Path) -> Option<Vec<u8>> {
    std::fs::read(data_dir.join("search/meta.json")).ok()
}

#[test]
fn the_data_of_every_earlier_release_serves_the_same_answers_and_takes_new_writes() {
    for fixture in fixtures() {
        eprintln!("the fixture in {}", fixture.display());
        let m = manifest(&fixture);
        let dir = tempfile::tempdir().unwrap();
        copy_fixture(&fixture, dir.path());
        let index_before = index_commit(&dir.path().join("data"));
        let mut s = serve_fixture(&m, dir);
        check_same_answers(&s, &m);
        let events = events_after(&s, &m, &m.first_event_id, m.events.len());
        assert_eq!(
            events.iter().map(numbers_as_f64).collect::<Vec<_>>(),
            m.events.iter().map(numbers_as_f64).collect::<Vec<_>>(),
            "the change stream resumed from the fixture's first event"
        );
        if !on_postgres() {
            assert!(index_before.is_some(), "the fixture has a search index");
            assert_eq!(
                index_commit(s.data_dir()),
                index_before,
                "the release's search index was rebuilt instead of opened: if this build \
                 cannot read it, say so in docs/src/upgrading.md (a rebuild takes time at the \
                 first start)"
            );
        }
        check_new_writes_and_key_grace(&mut s, &m);
    }
}

/// Fields later builds add to the answers of earlier releases, as this build writes them for
/// data an earlier release stored: additive changes, which clients ignore. Each is named here,
/// with the change that added it, so that nothing else may differ by a byte.
const ADDED_FIELDS: &[&str] = &[
    // Endpoint objects: the JSON Schema and the retention windows (#41), as they are for data
    // stored before (the fixtures' servers keep the default [retention]).
    r#""schema":null,"#,
    r#""retention":{"sandbox":null,"production":null},"effective_retention":{"sandbox":"30d","production":"60d"},"#,
    // Deliveries: whether their record was erased (#41).
    r#","erased":false"#,
    // Endpoint objects: the rejection of the last deploy request; notifications: how what
    // they announced was settled (#42).
    r#""last_rejection":null,"#,
    r#","resolution":null,"resolved_at":null"#,
    // Deliveries: whether each is a test event, and the event each announces, read from the
    // body of those stored before (#42).
    r#","test":false"#,
    r#""event":"record.created","#,
    r#""event":"record.replaced","#,
    r#""event":"record.deleted","#,
    // Personal tokens: their expiry, none for a token made before tokens could expire (#42).
    r#","expires_at":null,"expired":false"#,
    // Request-log entries: the record each call was about, none for those logged before (#42).
    r#","record_id":null,"record_count":null"#,
];

/// The refusal a later build gives on purpose where a release answered, with the change that
/// made it so: a read with the session cookie alone whose answer holds API keys or signing
/// secrets is refused with `token_required` (#42; a browser's is sent to the dashboard page).
fn refused_now(m: &Manifest, answer: &Answer) -> Option<(u16, &'static str)> {
    let session = matches!(
        answer.caller,
        Caller::OwnerSession | Caller::CollaboratorSession
    );
    let endpoint = format!("/api/v1/manage/endpoints/{}", m.slug);
    let holds_keys = answer.path == "/api/v1/manage/endpoints"
        || answer.path == endpoint
        || answer
            .path
            .starts_with(&format!("{endpoint}/webhook-secrets/"));
    (session && holds_keys).then_some((403, "token_required"))
}

/// `now` without the [`ADDED_FIELDS`] that `release` lacks.
fn without_added_fields(now: &str, release: &str) -> String {
    ADDED_FIELDS
        .iter()
        .filter(|field| !release.contains(*field))
        .fold(now.to_string(), |text, field| text.replace(field, ""))
}

/// Every answer of the fixture, then what each part of the data must still do.
fn check_same_answers(s: &InProcessServer, m: &Manifest) {
    let mut differ = Vec::new();
    for answer in &m.answers {
        let r = get_as(s, m, answer.caller, &answer.path);
        let error_code = |body: &str| {
            serde_json::from_str::<Value>(body).ok()?["error"]["code"]
                .as_str()
                .map(str::to_string)
        };
        let same = if let Some((status, code)) = refused_now(m, answer) {
            r.status == status && error_code(&r.text()).as_deref() == Some(code)
        } else if (200..300).contains(&answer.status) {
            r.status == answer.status
                && without_added_fields(&r.text(), &answer.body) == answer.body
        } else {
            // An error's body carries the request's own id.
            r.status == answer.status && error_code(&r.text()) == error_code(&answer.body)
        };
        if !same {
            differ.push(format!(
                "GET {} as {:?}\n  release: {} {}\n  now:     {} {}",
                answer.path,
                answer.caller,
                answer.status,
                answer.body,
                r.status,
                r.text()
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} answers differ from the release's ({}):\n{}",
        differ.len(),
        m.answers.len(),
        m.written_by,
        differ.join("\n")
    );

    // Records byte for byte, numbers and text as they were sent.
    for (id, written) in &m.records {
        let r = get_as(
            s,
            m,
            written.reader(),
            &format!("/api/v1/data/{}/{id}", m.slug),
        );
        if written.deleted {
            assert_error(&r, 404, "record_not_found");
            continue;
        }
        assert_status(&r, 200);
        // Without escapes, a payload is stored as sent (less whitespace between tokens, of
        // which the fixture's have none).
        let body = r.text();
        if !written.sent.contains('\\') {
            assert!(
                body.contains(&format!("\"payload\":{}", written.sent)),
                "{id}: sent {}, served {body}",
                written.sent
            );
        }
    }
    // Among them, numbers past every machine type and text of every plane.
    let big = m
        .records
        .values()
        .find(|w| w.sent.contains("123456789012345678901234567890"))
        .expect("the record of big numbers");
    for kept in [
        "123456789012345678901234567890",
        "\"ratio\":1E2",
        "Zürich",
        "👩‍👩‍👧‍👦",
    ] {
        assert!(big.sent.contains(kept), "{kept} in {}", big.sent);
    }

    // Search finds them by their unicode text and their digits.
    for (q, must) in [
        ("ZÜRICH", "Zürich"),
        ("345678901234567890123", "123456789012345678901234567890"),
    ] {
        let r = get_as(
            s,
            m,
            Caller::Sandbox,
            &format!("/api/v1/data/{}/search?q={}", m.slug, url_encode(q)),
        );
        assert_status(&r, 200);
        assert!(r.text().contains(must), "search {q}: {}", r.text());
    }

    // Deliveries in every state, as the log showed them.
    let mut states = BTreeMap::new();
    for d in deliveries(s, m, "sandbox")
        .into_iter()
        .chain(deliveries(s, m, "production"))
    {
        let state = d["state"].as_str().expect("state").to_string();
        if state == "pending" {
            assert_eq!(d["failing"], true, "{d}");
            assert!(d["attempts"].as_u64() >= Some(1), "{d}");
            assert!(d["next_attempt_at"].as_str() > Some(m.now.as_str()), "{d}");
        }
        *states.entry(state).or_insert(0) += 1;
    }
    let names: Vec<&str> = states.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["delivered", "given_up", "pending", "skipped"],
        "{states:?}"
    );

    // Sessions of both members still sign in.
    for (caller, member) in [
        (Caller::OwnerSession, &m.owner),
        (Caller::CollaboratorSession, &m.collaborator),
    ] {
        let r = get_as(s, m, caller, "/api/v1/auth/session");
        assert_status(&r, 200);
        assert_eq!(r.json()["email"], member.email.as_str());
    }
    let (name, value) = credentials(m, Caller::OwnerSession);
    let page = s.request(
        "GET",
        "/dashboard/endpoints",
        &[(name, value.as_str())],
        None,
    );
    assert_status(&page, 200);
    assert!(
        page.text().contains("Fixture ✓ Ünïcödé 日本"),
        "{}",
        page.text()
    );

    // The request log, entry for entry (what this server logs itself comes later by its
    // clock).
    for (environment, entries) in &m.request_log {
        assert!(!entries.is_empty(), "{environment}");
        let now = Value::from(request_log_before(s, m, environment, &m.now)).to_string();
        let release = Value::from(entries.clone()).to_string();
        assert_eq!(
            without_added_fields(&now, &release),
            release,
            "the request log of {environment}"
        );
    }
}

/// New writes on the upgraded data: readable, searchable, polled after the old ones; the
/// idempotency key of the release's write still answers its record; then the replaced key
/// works until its grace period ends, by the injected clock, and not a moment longer.
fn check_new_writes_and_key_grace(s: &mut InProcessServer, m: &Manifest) {
    let key = &m.keys[&Caller::Sandbox];
    s.advance(Duration::from_secs(1));
    let new = s.create_record(&m.slug, key, &json!({"name": "after the upgrade ✓"}));
    let id = new["id"].as_str().expect("id").to_string();
    assert_status(&s.get_record(&m.slug, key, &id), 200);
    let r = s.data(
        "GET",
        &format!(
            "/api/v1/data/{}/search?q={}",
            m.slug,
            url_encode("upgrade ✓")
        ),
        key,
        None,
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["data"][0]["id"], id.as_str(), "{}", r.text());
    // Poll shows what was created before its clock's present.
    s.advance(Duration::from_secs(1));
    let polled = s.poll_from_start(&m.slug, key);
    assert_eq!(polled.last().map(|r| &r["id"]), Some(&json!(id)));
    let idempotent = &m.records[&m.idempotent];
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{}", m.slug),
        &[
            ("Authorization", &format!("Bearer {key}")),
            ("Content-Type", "application/json"),
            ("Idempotency-Key", IDEMPOTENCY_KEY),
        ],
        Some(idempotent.sent.as_bytes()),
    );
    assert_status(&r, 202);
    assert_eq!(r.json()["id"], m.idempotent.as_str());

    let previous = &m.keys[&Caller::PreviousSandbox];
    let until = at(&m.previous_valid_until);
    assert_eq!(
        until,
        at(&m.now)
            .plus(Duration::from_secs(GRACE_SECONDS))
            .min(until),
        "the grace period ends after the fixture's time"
    );
    s.clock.set(until.minus(Duration::from_secs(1)));
    assert_status(&s.list(&m.slug, previous, ""), 200);
    s.clock.set(until);
    assert_error(&s.list(&m.slug, previous, ""), 401, "invalid_api_key");
    assert_status(&s.list(&m.slug, key, ""), 200);
}

/// PostgreSQL's migrations as this build embeds them (`src/store/postgres/migrations/`):
/// `(version, SQL)`, in order.
fn migrations() -> Vec<(u32, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/postgres/migrations");
    let mut migrations: Vec<(u32, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let version = name
                .split('_')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{name}: not NNNN_name.sql"));
            (version, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    migrations.sort();
    migrations
}

/// The database a server of the migration set before the latest one made, holding the data of
/// the fixture's: its schema from those migrations' own SQL (each with its row in
/// `intake_schema`, as a server records it), and the fixture's rows of each of its tables (in
/// place of any a migration seeded), in the columns both schemas have, with the sequences where
/// the fixture's were.
fn database_of_the_previous_migration_set(release: &str) -> String {
    let cluster = postgres::shared();
    let migrations = migrations();
    let (_, earlier) = migrations.split_last().expect("migrations");
    let url = cluster.database();
    let older = postgres::database_name(&url);
    let mut schema = String::from(
        "CREATE TABLE intake_schema (version integer PRIMARY KEY, \
         applied_at timestamptz NOT NULL DEFAULT now());\n",
    );
    for (version, sql) in earlier {
        schema += &format!(
            "BEGIN;\n{sql}\nINSERT INTO intake_schema (version) VALUES ({version});\nCOMMIT;\n"
        );
    }
    cluster.psql_script(older, schema.as_bytes());
    let tables = cluster.psql(
        older,
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' \
         AND tablename <> 'intake_schema' ORDER BY 1",
    );
    // The columns of `table` in `database`, in order.
    let columns_of = |database: &str, table: &str| -> Vec<String> {
        cluster
            .psql(
                database,
                &format!(
                    "SELECT quote_ident(column_name) FROM information_schema.columns \
                     WHERE table_schema = 'public' AND table_name = '{table}' \
                     ORDER BY ordinal_position"
                ),
            )
            .lines()
            .map(str::to_string)
            .collect()
    };
    for table in tables.lines() {
        // The fixture's release may predate migrations of the earlier set: what they added
        // keeps its default (a table of its own stays empty).
        let in_release = columns_of(release, table);
        let columns: Vec<String> = columns_of(older, table)
            .into_iter()
            .filter(|column| in_release.contains(column))
            .collect();
        if columns.is_empty() {
            continue;
        }
        let columns = columns.join(",");
        // A migration may seed rows (counters): the fixture's take their place.
        let mut load =
            format!("DELETE FROM {table};\nCOPY {table} ({columns}) FROM STDIN;\n").into_bytes();
        load.extend(cluster.psql_script(
            release,
            format!("COPY (SELECT {columns} FROM {table}) TO STDOUT").as_bytes(),
        ));
        load.extend_from_slice(b"\\.\n");
        cluster.psql_script(older, &load);
    }
    let sequences_of = |database: &str| -> Vec<String> {
        cluster
            .psql(
                database,
                "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public' ORDER BY 1",
            )
            .lines()
            .map(str::to_string)
            .collect()
    };
    let in_release = sequences_of(release);
    // A sequence of a migration newer than the fixture's release keeps its start.
    for sequence in sequences_of(older)
        .iter()
        .filter(|sequence| in_release.contains(sequence))
    {
        let at = cluster.psql(
            release,
            &format!("SELECT last_value || ',' || is_called FROM {sequence}"),
        );
        cluster.psql(older, &format!("SELECT setval('{sequence}', {at})"));
    }
    url
}

#[test]
fn a_database_of_the_previous_migration_set_is_migrated_at_start_and_serves_the_same_answers() {
    if postgres_only("the migrations of PostgreSQL's schema") {
        return;
    }
    let fixture = newest_fixture();
    let m = manifest(&fixture);
    let cluster = postgres::shared();
    let release = cluster.restore(&dump_of(&fixture));
    let older = database_of_the_previous_migration_set(postgres::database_name(&release));
    cluster.drop_database(&release);
    let latest = migrations().last().expect("migrations").0;
    let schema = |url: &str| {
        cluster.psql(
            postgres::database_name(url),
            "SELECT string_agg(version::text, ',' ORDER BY version) FROM intake_schema",
        )
    };
    let before: Vec<String> = (1..latest).map(|v| v.to_string()).collect();
    assert_eq!(schema(&older), before.join(","));

    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture.join("data"), &dir.path().join("data"));
    use_database(&dir.path().join("data"), older.clone());
    let mut s = serve_fixture(&m, dir);
    let after: Vec<String> = (1..=latest).map(|v| v.to_string()).collect();
    assert_eq!(schema(&older), after.join(","), "migrated once, at start");
    check_same_answers(&s, &m);
    check_new_writes_and_key_grace(&mut s, &m);
}

// ---------------------------------------------------------------------------
// Layouts this build does not know
// ---------------------------------------------------------------------------

/// `intake <command> --data-dir DIR`, to its exit.
fn run_on(command: &str, data: &Path) -> Output {
    let mut cmd = intake_cmd();
    cmd.arg(command).arg("--data-dir").arg(data);
    if command == "serve" {
        cmd.args(["--listen", "127.0.0.1:0"]);
    }
    run_cli(&mut cmd, Duration::from_secs(30))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The layout version in `META` of the redb file at `path`.
fn stored_layout(path: &Path) -> u32 {
    let db = redb::Database::open(path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let meta = txn.open_table(META).unwrap();
    let version = meta
        .get("schema_version")
        .unwrap()
        .expect("a layout version");
    std::str::from_utf8(version.value())
        .unwrap()
        .parse()
        .unwrap()
}

fn set_layout(path: &Path, version: u32) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META)
        .unwrap()
        .insert("schema_version", version.to_string().as_bytes())
        .unwrap();
    txn.commit().unwrap();
}

const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");

#[test]
fn a_data_dir_of_a_newer_layout_is_refused_by_serve_and_check_naming_both_versions() {
    let mut s = TestServer::start();
    let data = s.data_dir();
    if !on_postgres() {
        let out = run_on("check", &data);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "{}: in use by a running server, so not read",
                data.join("intake.redb").display()
            )),
            "{}",
            stderr(&out)
        );
    }
    s.sigterm_and_wait();
    if on_postgres() {
        let url = database_of(&data);
        let db = postgres::database_name(&url);
        let latest: u32 = postgres::shared()
            .psql(db, "SELECT max(version) FROM intake_schema")
            .parse()
            .unwrap();
        postgres::shared().psql(
            db,
            &format!(
                "INSERT INTO intake_schema (version) VALUES ({})",
                latest + 1
            ),
        );
        let out = run_on("serve", &data);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        for part in [
            format!(
                "the database holds schema version {}, written by a newer intake",
                latest + 1
            ),
            format!("knows schema versions up to {latest} and changed nothing"),
            "restore the database from the dump taken before the upgrade".to_string(),
            "docs/src/upgrading.md".to_string(),
        ] {
            assert!(err.contains(&part), "{part:?} not in {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
        let versions = postgres::shared().psql(db, "SELECT count(*) FROM intake_schema");
        assert_eq!(versions, (latest + 1).to_string(), "the schema was changed");
        return;
    }
    for file in ["intake.redb", "requests.redb"] {
        let path = data.join(file);
        let current = stored_layout(&path);
        let out = run_on("check", &data);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "{}: layout version {current}, this intake's",
                path.display()
            )),
            "{}",
            stderr(&out)
        );
        set_layout(&path, current + 1);
        let before = std::fs::read_dir(&data).unwrap().count();
        for command in ["serve", "check"] {
            let out = run_on(command, &data);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{command}: {err}");
            for part in [
                format!(
                    "{} has layout version {}, written by a newer intake",
                    path.display(),
                    current + 1
                ),
                format!("uses layout version {current} and cannot read it"),
                "Run the newer intake again".to_string(),
                "restore a backup taken with it".to_string(),
                "docs/src/upgrading.md".to_string(),
            ] {
                assert!(err.contains(&part), "{command}: {part:?} not in {err}");
            }
            assert!(!err.contains("panicked"), "{command}: {err}");
            if command == "check" {
                assert!(
                    String::from_utf8_lossy(&out.stdout).contains("[storage]"),
                    "check still prints the configuration"
                );
            }
        }
        assert_eq!(stored_layout(&path), current + 1, "{file} was changed");
        assert_eq!(
            std::fs::read_dir(&data).unwrap().count(),
            before,
            "files were added to the data dir"
        );
        set_layout(&path, current);
    }
    s.restart();
}

// ---------------------------------------------------------------------------
// Writing the fixture
// ---------------------------------------------------------------------------

/// The sandbox's payloads, as sent (no whitespace between tokens, so each is stored as sent
/// unless it has escapes): numbers past every machine type, exponents, negative zero, text
/// of every plane, escapes.
const SANDBOX_PAYLOADS: [&str; 3] = [
    r#"{"name":"Zoë Ünïcödé","city":"Zürich","note":"日本語のテキスト 🎉 👩‍👩‍👧‍👦","amount":123456789012345678901234567890,"ratio":1E2,"negative_zero":-0,"avogadro":6.02214076e+23}"#,
    r#"{"name":"precision","big_negative":-98765432109876543210987654321.000000000000000000001,"list":[1,2.50,3E-7,null,true,false,{},[]],"nested":{"a":{"b":{"c":"deep ☃"}}}}"#,
    r#"{"name":"escapes","quote":"say \"hi\"","lines":"one\ntwo\ttab","unicode_escape":"\u00e9\ud83d\ude00","slash":"a\/b"}"#,
];

/// One data call with a raw body.
fn send(
    s: &ServerClient,
    method: &str,
    path: &str,
    key: &str,
    extra: &[(&str, &str)],
    body: Option<&str>,
) -> Resp {
    let auth = format!("Bearer {key}");
    let mut headers = vec![("Authorization", auth.as_str())];
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    headers.extend_from_slice(extra);
    s.request(method, path, &headers, body.map(str::as_bytes))
}

/// POSTs the payload `sent` to `data` with the `(key, environment)` given, and notes it in
/// `records`; returns its id.
fn create_record(
    s: &ServerClient,
    data: &str,
    records: &mut BTreeMap<String, Written>,
    (key, environment): (&str, &str),
    sent: &str,
    extra: &[(&str, &str)],
) -> String {
    let r = send(s, "POST", data, key, extra, Some(sent));
    assert_status(&r, 202);
    let id = r.json()["id"].as_str().expect("id").to_string();
    let written = Written {
        environment: environment.to_string(),
        sent: sent.to_string(),
        deleted: false,
    };
    records.insert(id.clone(), written);
    id
}

/// Writes the fixture of the backend under test into
/// `tests/fixtures/upgrade/<this version>/<backend>/` with this build's binary, replacing
/// what is there: run for each backend when a release is made
/// (`tests/fixtures/upgrade/README.md`).
#[test]
#[ignore = "writes tests/fixtures/upgrade/ (tests/fixtures/upgrade/README.md says when)"]
fn write_fixture() {
    let mut s = TestServer::start_with_config(CONFIG);
    let ok = Receiver::start();
    let later = Receiver::start();
    later.always(Reply::status(429).header("Retry-After", "3600"));
    let refuse = Receiver::start();
    refuse.always(Reply::status(400).body("{\"error\":\"not this one\"}"));

    let ep = s.create_endpoint("Fixture ✓ Ünïcödé 日本", &["name"]);
    let slug = ep.slug.clone();
    s.patch_endpoint(
        &slug,
        &json!({"description": "Upgrades keep every byte (#38)"}),
    );
    let manage = format!("/api/v1/manage/endpoints/{slug}");
    for body in [
        json!({"url": ok.url("/hooks/all?token=t0k3n"), "auth_header": "X-Hook-Secret",
               "auth_value": "hook-secret-1", "description": "every event ✓"}),
        json!({"url": later.url("/hooks/created"), "event_types": ["record.created"],
               "rate_limit": 5, "description": "answers 429: retried in an hour"}),
        json!({"url": ok.url("/hooks/off"), "enabled": false,
               "description": "disabled: its deliveries are skipped"}),
    ] {
        let r = s.manage(
            "POST",
            &format!("{manage}/webhooks/sandbox/subscriptions"),
            Some(&body),
        );
        assert_status(&r, 201);
    }
    s.deploy(&slug);
    let collaborator = add_collaborator(&s, &slug, COLLABORATOR_EMAIL, &["read", "create"]);
    let r = s.manage(
        "POST",
        &format!("{manage}/invitations"),
        Some(&json!({"email": "pending@example.com", "permissions": ["read"]})),
    );
    assert_status(&r, 201);
    let r = s.manage(
        "POST",
        "/api/v1/manage/tokens",
        Some(&json!({"name": "fixture token ✓"})),
    );
    assert_status(&r, 201);
    let personal_token = r.json()["token"].as_str().expect("token").to_string();
    let r = s.request_json(
        "POST",
        "/api/v1/auth/login",
        &[],
        Some(&json!({"email": OWNER_EMAIL, "password": s.password})),
    );
    assert_status(&r, 200);
    let owner_cookie = session_cookie(&r);

    // The writes, the change stream open from before the first.
    let data = format!("/api/v1/data/{slug}");
    let previous = ep.sandbox_key.clone();
    let production = ep.production_key.clone();
    let sandbox_of = |key: &str| (key.to_string(), "sandbox");
    let mut stream = common::sse::open(s.addr(), &slug, &previous, None, "")
        .unwrap_or_else(|r| panic!("stream: {}", r.describe()));
    let mut records = BTreeMap::new();
    let mut create = |(key, environment): (String, &str), sent: &str, extra: &[(&str, &str)]| {
        create_record(&s, &data, &mut records, (&key, environment), sent, extra)
    };
    for sent in SANDBOX_PAYLOADS {
        create(sandbox_of(&previous), sent, &[]);
    }
    let first_event_id = stream
        .next()
        .and_then(|e| e.id)
        .expect("the first event's id");
    drop(stream);
    let callback = refuse.url("/callback?sig=abc");
    create(
        sandbox_of(&previous),
        r#"{"name":"caller webhook","order":42}"#,
        &[
            ("X-Webhook-Callback", &callback),
            ("X-Webhook-Auth", "caller-secret"),
        ],
    );
    let replaced = create(sandbox_of(&previous), r#"{"name":"before"}"#, &[]);
    let deleted = create(sandbox_of(&previous), r#"{"name":"to be deleted"}"#, &[]);
    let idempotent = create(
        sandbox_of(&previous),
        r#"{"name":"idempotent","n":1}"#,
        &[("Idempotency-Key", IDEMPOTENCY_KEY)],
    );
    create(
        sandbox_of(&collaborator.sandbox_key),
        r#"{"name":"from the collaborator"}"#,
        &[],
    );
    let callback = ok.url("/production");
    create(
        (production.clone(), "production"),
        r#"{"name":"production ✓","amount":1E400,"currency":"€"}"#,
        &[("X-Webhook-Callback", &callback)],
    );
    let after = r#"{"name":"after ✓","version":2}"#;
    let r = send(
        &s,
        "PUT",
        &format!("{data}/{replaced}"),
        &previous,
        &[],
        Some(after),
    );
    assert_status(&r, 202);
    records.get_mut(&replaced).expect("replaced").sent = after.to_string();
    let r = send(
        &s,
        "DELETE",
        &format!("{data}/{deleted}"),
        &previous,
        &[],
        None,
    );
    assert_status(&r, 202);
    records.get_mut(&deleted).expect("deleted").deleted = true;
    // Every sandbox write is an event: its creates, the replace and the delete.
    let events = records
        .values()
        .filter(|w| w.environment == "sandbox")
        .count()
        + 2;

    // Every delivery attempted once, or kept from it: delivered, given up, failing (its next
    // attempt an hour away), skipped.
    let settled = |d: &Value| match d["state"].as_str() {
        Some("pending") => d["failing"] == true && d["attempts"].as_u64() >= Some(1),
        _ => true,
    };
    // Two subscriptions take every sandbox event, one only its creates, plus the two caller
    // webhooks.
    let made = 2 * events + (events - 2) + 2;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let r = s.manage(
            "GET",
            &format!("{manage}/deliveries?environment=sandbox&limit=100"),
            None,
        );
        let p = s.manage(
            "GET",
            &format!("{manage}/deliveries?environment=production&limit=100"),
            None,
        );
        let all: Vec<Value> = [r, p]
            .iter()
            .flat_map(|r| r.json()["data"].as_array().cloned().unwrap_or_default())
            .collect();
        if all.len() == made && all.iter().all(settled) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "deliveries did not settle: {}",
            serde_json::to_string_pretty(&all).unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The sandbox key replaced, the old one in its grace period.
    let r = s.manage(
        "POST",
        &format!("{manage}/keys/sandbox/rotate"),
        Some(&json!({"grace_period_seconds": GRACE_SECONDS})),
    );
    assert_status(&r, 200);
    let rotation = r.json();
    let sandbox = rotation["key"].as_str().expect("key").to_string();
    let previous_valid_until = rotation["previous_valid_until"]
        .as_str()
        .expect("previous_valid_until")
        .to_string();

    // The search index has taken every write.
    let deadline = std::time::Instant::now() + WAIT;
    while !send(
        &s,
        "GET",
        &format!("{data}/search?q=collaborator"),
        &sandbox,
        &[],
        None,
    )
    .text()
    .contains("from the collaborator")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "search never found the last write"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut m = Manifest {
        written_by: String::new(),
        now: String::new(),
        owner: Member {
            email: OWNER_EMAIL.to_string(),
            password: s.password.clone(),
            cookie: owner_cookie,
        },
        collaborator: Member {
            email: COLLABORATOR_EMAIL.to_string(),
            password: COLLABORATOR_PASSWORD.to_string(),
            cookie: collaborator.cookie.clone(),
        },
        slug: slug.clone(),
        keys: BTreeMap::from([
            (Caller::Owner, s.owner_token.clone()),
            (Caller::OwnerPersonalToken, personal_token),
            (Caller::Sandbox, sandbox),
            (Caller::PreviousSandbox, previous),
            (Caller::Production, production),
            (
                Caller::CollaboratorSandbox,
                collaborator.sandbox_key.clone(),
            ),
        ]),
        previous_valid_until,
        records,
        idempotent,
        first_event_id,
        events: Vec::new(),
        request_log: BTreeMap::new(),
        answers: Vec::new(),
    };
    // Every call so far in the request log before the server stops.
    for (environment, key) in [
        ("sandbox", Caller::Sandbox),
        ("production", Caller::Production),
    ] {
        let last = get_as(&s, &m, key, &format!("{data}?limit=1")).request_id();
        s.wait_request_log(&slug, environment, WAIT, |entries| {
            entries.iter().any(|e| e["request_id"] == last.as_str())
        });
    }
    s.sigterm_and_wait();

    let version = run_cli(intake_cmd().arg("--version"), Duration::from_secs(30));
    m.written_by = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let out = fixtures_root()
        .join(env!("CARGO_PKG_VERSION"))
        .join(backend_name());
    let _ = std::fs::remove_dir_all(&out);
    let data_dir = s.data_dir();
    std::fs::remove_file(data_dir.join("intake.toml")).expect("the test's config file");
    copy_tree(&data_dir, &out.join("data"));
    if let Some(dump) = dump_database(&data_dir) {
        std::fs::write(out.join(DUMP), dump).unwrap();
    }

    // The answers, all at `now`, given by this build serving a copy of the fixture on a clock
    // stopped there (the binary's clock would move between them), and the request log
    // before `now`: every call the binary logged.
    m.now = SystemClock.now().to_rfc3339();
    let copy = tempfile::tempdir().unwrap();
    copy_fixture(&out, copy.path());
    let s = serve_fixture(&m, copy);
    m.events = events_after(&s, &m, &m.first_event_id, events - 1);
    let deliveries: Vec<String> = ["sandbox", "production"]
        .iter()
        .flat_map(|env| delivery_ids(&s, &m, env))
        .collect();
    m.answers = reads(&m, &deliveries)
        .into_iter()
        .map(|(caller, path)| {
            let r = get_as(&s, &m, caller, &path);
            Answer {
                caller,
                path,
                status: r.status,
                body: r.text(),
            }
        })
        .collect();
    for environment in ["sandbox", "production"] {
        let entries = request_log_before(&s, &m, environment, &m.now);
        m.request_log.insert(environment.to_string(), entries);
    }
    let manifest = serde_json::to_string_pretty(&m).unwrap() + "\n";
    std::fs::write(out.join(MANIFEST), manifest).unwrap();
}
