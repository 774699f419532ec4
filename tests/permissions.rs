//! Data-call permissions: the full access matrix.
//!
//! Every data method (POST create, POST batch, GET single, GET list, GET search, GET poll, PUT,
//! DELETE) is
//! called with every kind of key: the owner's default sandbox key, a collaboration key holding
//! each single permission, a collaboration key holding every permission but the needed one, a
//! removed collaborator's key, the owner's and a collaborator's production key before and after
//! deploy, keys of an inactive endpoint, and the keys of a suspended collaborator. Each cell
//! asserts the status and error code and names the method and key kind when it fails.
//!
//! A refused call must change nothing: for every refused write the owner's view of the
//! endpoint's records (both environments once deployed) is the same before and after, and no
//! refused call is counted in the endpoint's monthly usage.
//!
//! Every test builds its fixture (server, endpoint, collaborators) once and runs its cells
//! against it; permissions are changed between rows with `PATCH .../collaborators/{id}`, which
//! takes effect at once.

use crate::common;

use common::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// Data methods
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Batch,
    GetOne,
    List,
    Search,
    Poll,
    Replace,
    Delete,
}

const OPS: [Op; 8] = [
    Op::Create,
    Op::Batch,
    Op::GetOne,
    Op::List,
    Op::Search,
    Op::Poll,
    Op::Replace,
    Op::Delete,
];

const PERMISSIONS: [&str; 4] = ["create", "read", "replace", "delete"];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Create => "POST create",
            Op::Batch => "POST batch",
            Op::GetOne => "GET single",
            Op::List => "GET list",
            Op::Search => "GET search",
            Op::Poll => "GET poll",
            Op::Replace => "PUT replace",
            Op::Delete => "DELETE",
        }
    }

    /// The permission the method needs.
    fn needs(self) -> &'static str {
        match self {
            Op::Create | Op::Batch => "create",
            Op::GetOne | Op::List | Op::Search | Op::Poll => "read",
            Op::Replace => "replace",
            Op::Delete => "delete",
        }
    }

    fn success(self) -> u16 {
        match self {
            Op::Create | Op::Batch | Op::Replace | Op::Delete => 202,
            Op::GetOne | Op::List | Op::Search | Op::Poll => 200,
        }
    }

    fn is_write(self) -> bool {
        matches!(self, Op::Create | Op::Batch | Op::Replace | Op::Delete)
    }

    /// Whether the method names a record (the cell gets a fresh one).
    fn takes_record(self) -> bool {
        matches!(self, Op::GetOne | Op::Replace | Op::Delete)
    }
}

fn perform(s: &TestServer, slug: &str, op: Op, key: &str, target: &str) -> Resp {
    match op {
        Op::Create => s.post_record(slug, key, &json!({"probe": "abc created"})),
        Op::Batch => s.request(
            "POST",
            &format!("/api/v1/data/{slug}/batch"),
            &[
                ("Authorization", &format!("Bearer {key}")),
                ("Content-Type", "application/x-ndjson"),
            ],
            Some(b"{\"probe\":\"abc batched\"}\n{\"probe\":\"abc batched\"}\n"),
        ),
        Op::GetOne => s.get_record(slug, key, target),
        Op::List => s.list(slug, key, ""),
        Op::Search => s.data(
            "GET",
            &format!("/api/v1/data/{slug}/search?q=abc"),
            key,
            None,
        ),
        Op::Poll => s.data("GET", &format!("/api/v1/data/{slug}/poll"), key, None),
        Op::Replace => s.put_record(slug, key, target, &json!({"probe": "abc replaced"})),
        Op::Delete => s.delete_record(slug, key, target),
    }
}

/// What a cell expects.
#[derive(Clone, Copy, Debug)]
enum Want {
    Allowed,
    Refused(u16, &'static str),
}

fn missing(permission: &str) -> &'static str {
    match permission {
        "create" => "missing_permission_create",
        "read" => "missing_permission_read",
        "replace" => "missing_permission_replace",
        "delete" => "missing_permission_delete",
        other => panic!("no such permission {other}"),
    }
}

/// Allowed iff the key's permissions include what the method needs; else 403 with its code.
fn by_permissions(held: &[&str]) -> impl Fn(Op) -> Want {
    let held: Vec<String> = held.iter().map(|p| p.to_string()).collect();
    move |op| {
        if held.iter().any(|p| p == op.needs()) {
            Want::Allowed
        } else {
            Want::Refused(403, missing(op.needs()))
        }
    }
}

fn all(want: Want) -> impl Fn(Op) -> Want {
    move |_| want
}

// ---------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------

fn collaborator_path(slug: &str, id: u64) -> String {
    format!("/api/v1/manage/endpoints/{slug}/collaborators/{id}")
}

/// The collaborator's production key as their endpoint view shows it.
fn shown_production_key(s: &TestServer, c: &Collaborator, slug: &str) -> Value {
    let path = format!("/api/v1/manage/endpoints/{slug}");
    let r = s.manage_with("GET", &path, Some(&c.authorization(s)), None);
    assert_status(&r, 200);
    r.json()["production_key"].clone()
}

fn set_permissions(s: &TestServer, slug: &str, c: &Collaborator, permissions: &[&str]) {
    let r = s.manage(
        "PATCH",
        &collaborator_path(slug, c.id),
        Some(&json!({ "permissions": permissions })),
    );
    assert_status(&r, 200);
    let mut sorted: Vec<&str> = permissions.to_vec();
    sorted.sort_by_key(|p| PERMISSIONS.iter().position(|q| q == p));
    assert_eq!(r.json()["permissions"], json!(sorted), "{}", r.describe());
}

fn set_suspended(s: &TestServer, c: &Collaborator, suspended: bool) {
    let r = s.manage(
        "PATCH",
        &format!("/api/v1/manage/accounts/{}", c.id),
        Some(&json!({ "suspended": suspended })),
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["suspended"], suspended);
}

fn set_active(s: &TestServer, slug: &str, active: bool) {
    let v = s.patch_endpoint(slug, &json!({ "active": active }));
    assert_eq!(v["active"], active);
}

/// Reads a collaborator's production key from the data dir while the server is stopped: the
/// API shows it only once the endpoint is deployed, and the matrix must also show that the
/// hidden key does not work before that.
fn production_key_from_store(s: &mut TestServer, slug: &str, account_id: u64) -> String {
    assert!(
        s.sigterm_and_wait().success(),
        "server did not stop cleanly"
    );
    let key = {
        let config = common::config_with_storage("", &s.data_dir());
        let (store, sealer) = intake::server::open_data_dir(&config).expect("open data dir");
        let snapshot = store.read().expect("read snapshot");
        let endpoint_id = snapshot
            .endpoint_id_by_slug(slug)
            .unwrap()
            .expect("endpoint slug in store");
        let row = snapshot
            .collaborator(endpoint_id, account_id)
            .unwrap()
            .expect("collaborator row in store");
        sealer
            .open_string(&row.production_key_sealed)
            .expect("unseal production key")
    };
    s.restart();
    assert!(key.starts_with("tm_live_"), "{key}");
    key
}

/// Runs rows of the matrix against one endpoint.
struct Matrix<'a> {
    s: &'a TestServer,
    slug: &'a str,
    /// Owner keys of the partitions a refusal must leave unchanged.
    watch: Vec<String>,
}

/// `(sandbox, production)` data calls counted, summed over every month.
fn usage_totals(s: &TestServer, slug: &str) -> (u64, u64) {
    let r = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{slug}/usage"),
        None,
    );
    assert_status(&r, 200);
    let v = r.json();
    let months = v["months"].as_array().expect("months array");
    months.iter().fold((0, 0), |(s, p), m| {
        (
            s + m["sandbox"].as_u64().unwrap(),
            p + m["production"].as_u64().unwrap(),
        )
    })
}

impl Matrix<'_> {
    fn snapshot(&self) -> Vec<Vec<Value>> {
        self.watch
            .iter()
            .map(|key| self.s.list_all(self.slug, key, 30).0)
            .collect()
    }

    /// One row: every method with `key`. Records the method names are created fresh with
    /// `seed_key` (an owner key; of the same environment as `key` for rows with allowed
    /// cells), which also checks the effect of allowed writes.
    fn row(&self, kind: &str, key: &str, seed_key: &str, want: impl Fn(Op) -> Want) {
        let (s, slug) = (self.s, self.slug);
        for op in OPS {
            let target = if op.takes_record() {
                let v = s.create_record(slug, seed_key, &json!({"probe": "abc seed"}));
                v["id"].as_str().expect("id").to_string()
            } else {
                unknown_record_id()
            };
            let cell = format!("{} with {kind}", op.name());
            match want(op) {
                Want::Allowed => {
                    let r = perform(s, slug, op, key, &target);
                    assert_eq!(
                        r.status,
                        op.success(),
                        "{cell}: expected {} (allowed), got {}",
                        op.success(),
                        r.describe()
                    );
                    self.check_effect(op, &cell, &r, seed_key, &target);
                }
                Want::Refused(status, code) => {
                    let before = op.is_write().then(|| self.snapshot());
                    let usage_before = usage_totals(s, slug);
                    let r = perform(s, slug, op, key, &target);
                    assert_eq!(
                        (r.status, r.error_code().as_deref()),
                        (status, Some(code)),
                        "{cell}: expected {status} {code}, got {}",
                        r.describe()
                    );
                    assert_eq!(
                        usage_totals(s, slug),
                        usage_before,
                        "{cell}: a refused call was counted in the usage"
                    );
                    if let Some(before) = before {
                        assert_eq!(
                            self.snapshot(),
                            before,
                            "{cell}: a refused write changed the endpoint's records"
                        );
                    }
                }
            }
        }
    }

    fn check_effect(&self, op: Op, cell: &str, r: &Resp, seed_key: &str, target: &str) {
        let (s, slug) = (self.s, self.slug);
        match op {
            Op::Create => {
                let id = r.json()["id"].as_str().expect("id").to_string();
                assert_status(&s.get_record(slug, seed_key, &id), 200);
            }
            Op::Batch => {
                let data = r.json()["data"].as_array().cloned().unwrap_or_default();
                assert_eq!(data.len(), 2, "{cell}: {}", r.describe());
                for record in data {
                    let id = record["id"].as_str().expect("id");
                    assert_status(&s.get_record(slug, seed_key, id), 200);
                }
            }
            Op::GetOne => assert_eq!(r.json()["id"], target, "{cell}"),
            Op::Replace => {
                let v = s.get_record(slug, seed_key, target).json();
                assert_eq!(v["payload"]["probe"], "abc replaced", "{cell}: {v}");
            }
            Op::Delete => {
                let g = s.get_record(slug, seed_key, target);
                assert_eq!(
                    g.status,
                    404,
                    "{cell}: record still there: {}",
                    g.describe()
                );
            }
            Op::List | Op::Search | Op::Poll => {
                assert!(r.json()["data"].is_array(), "{cell}: {}", r.describe());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn owner_default_sandbox_key_may_call_every_data_method() {
    let s = TestServer::start();
    let ep = s.create_endpoint("matrix", &[]);
    let m = Matrix {
        s: &s,
        slug: &ep.slug,
        watch: vec![ep.sandbox_key.clone()],
    };
    m.row(
        "owner sandbox key",
        &ep.sandbox_key,
        &ep.sandbox_key,
        all(Want::Allowed),
    );
}

#[test]
fn collaboration_key_with_one_permission_may_call_only_the_methods_it_covers() {
    let s = TestServer::start();
    let ep = s.create_endpoint("matrix", &[]);
    let c = add_collaborator(&s, &ep.slug, "single@example.com", &["create"]);
    let m = Matrix {
        s: &s,
        slug: &ep.slug,
        watch: vec![ep.sandbox_key.clone()],
    };
    for permission in PERMISSIONS {
        set_permissions(&s, &ep.slug, &c, &[permission]);
        m.row(
            &format!("collaboration key [{permission}]"),
            &c.sandbox_key,
            &ep.sandbox_key,
            by_permissions(&[permission]),
        );
    }
}

#[test]
fn collaboration_key_lacking_only_the_needed_permission_is_refused_with_its_code() {
    let s = TestServer::start();
    let ep = s.create_endpoint("matrix", &[]);
    let c = add_collaborator(&s, &ep.slug, "lacking@example.com", &["read"]);
    let m = Matrix {
        s: &s,
        slug: &ep.slug,
        watch: vec![ep.sandbox_key.clone()],
    };
    for lacking in PERMISSIONS {
        let held: Vec<&str> = PERMISSIONS.into_iter().filter(|p| *p != lacking).collect();
        set_permissions(&s, &ep.slug, &c, &held);
        m.row(
            &format!("collaboration key without {lacking} {held:?}"),
            &c.sandbox_key,
            &ep.sandbox_key,
            by_permissions(&held),
        );
    }
}

#[test]
fn removed_collaborators_keys_are_refused_at_once() {
    let s = TestServer::start();
    let ep = s.create_endpoint("matrix", &[]);
    let c = add_collaborator(&s, &ep.slug, "removed@example.com", &PERMISSIONS);
    s.deploy(&ep.slug);
    let production_key = shown_production_key(&s, &c, &ep.slug)
        .as_str()
        .expect("production key shown once deployed")
        .to_string();
    let m = Matrix {
        s: &s,
        slug: &ep.slug,
        watch: vec![ep.sandbox_key.clone(), ep.production_key.clone()],
    };
    // Working before the removal...
    m.row(
        "collaboration sandbox key before removal",
        &c.sandbox_key,
        &ep.sandbox_key,
        all(Want::Allowed),
    );
    let authorization = c.authorization(&s);
    let r = s.manage("DELETE", &collaborator_path(&ep.slug, c.id), None);
    assert_status(&r, 200);
    // ...and refused by the very next call.
    m.row(
        "removed collaborator's sandbox key",
        &c.sandbox_key,
        &ep.sandbox_key,
        all(Want::Refused(401, "invalid_api_key")),
    );
    m.row(
        "removed collaborator's production key",
        &production_key,
        &ep.production_key,
        all(Want::Refused(401, "invalid_api_key")),
    );
    let r = s.manage_with(
        "GET",
        &format!("/api/v1/manage/endpoints/{}", ep.slug),
        Some(&authorization),
        None,
    );
    assert_error(&r, 404, "endpoint_not_found");
}

#[test]
fn production_keys_are_refused_before_deploy_and_allowed_after() {
    let mut s = TestServer::start();
    let ep = s.create_endpoint("matrix", &[]);
    // Only `create`: before deploy, "not deployed" is the answer even where a permission lacks.
    let c = add_collaborator(&s, &ep.slug, "prod@example.com", &["create"]);
    assert_eq!(
        shown_production_key(&s, &c, &ep.slug),
        Value::Null,
        "a collaborator's production key must not be shown before deploy"
    );
    let hidden_key = production_key_from_store(&mut s, &ep.slug, c.id);
    let m = Matrix {
        s: &s,
        slug: &ep.slug,
        watch: vec![ep.sandbox_key.clone()],
    };
    let not_deployed = Want::Refused(403, "endpoint_not_deployed");
    m.row(
        "owner production key before deploy",
        &ep.production_key,
        &ep.sandbox_key,
        all(not_deployed),
    );
    m.row(
        "collaborator production key [create] before deploy",
        &hidden_key,
        &ep.sandbox_key,
        all(not_deployed),
    );
    set_permissions(&s, &ep.slug, &c, &PERMISSIONS);
    m.row(
        "collaborator production key [all] before deploy",
        &hidden_key,
        &ep.sandbox_key,
        all(not_deployed),
    );

    s.deploy(&ep.slug);
    assert_eq!(
        shown_production_key(&s, &c, &ep.slug),
        json!(hidden_key),
        "once deployed the collaborator sees their own production key"
    );
    assert!(
        s.list_ids(&ep.slug, &ep.production_key).is_empty(),
        "refused production calls before deploy must not have created records"
    );
    let m = Matrix {
        s: &s,
        slug: &ep.slug,
        watch: vec![ep.sandbox_key.clone(), ep.production_key.clone()],
    };
    m.row(
        "owner production key after deploy",
        &ep.production_key,
        &ep.production_key,
        all(Want::Allowed),
    );
    m.row(
        "collaborator production key [all] after deploy",
        &hidden_key,
        &ep.production_key,
        all(Want::Allowed),
    );
    set_permissions(&s, &ep.slug, &c, &["read"]);
    m.row(
        "collaborator production key [read] after deploy",
        &hidden_key,
        &ep.production_key,
        by_permissions(&["read"]),
    );
}

#[test]
fn inactive_endpoint_refuses_every_key_until_reactivated() {
    let s = TestServer::start();
    let ep = s.create_endpoint("matrix", &[]);
    let c = add_collaborator(&s, &ep.slug, "inactive@example.com", &PERMISSIONS);
    s.deploy(&ep.slug);
    let collaborator_production = shown_production_key(&s, &c, &ep.slug)
        .as_str()
        .expect("production key")
        .to_string();
    // Seed records while active; the refused cells target them.
    let sandbox_seed = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"probe": "abc"}));
    let production_seed = s.create_record(&ep.slug, &ep.production_key, &json!({"probe": "abc"}));
    let sandbox_before = s.list_all(&ep.slug, &ep.sandbox_key, 30).0;
    let production_before = s.list_all(&ep.slug, &ep.production_key, 30).0;
    let usage_before = usage_totals(&s, &ep.slug);

    set_active(&s, &ep.slug, false);
    let keys = [
        ("owner sandbox key", ep.sandbox_key.as_str()),
        ("owner production key", ep.production_key.as_str()),
        ("collaboration sandbox key", c.sandbox_key.as_str()),
        (
            "collaboration production key",
            collaborator_production.as_str(),
        ),
    ];
    // While inactive no owner key can read, so this row compares afterwards.
    for (kind, key) in keys {
        for op in OPS {
            let target = if key.starts_with("tm_live_") {
                &production_seed["id"]
            } else {
                &sandbox_seed["id"]
            };
            let r = perform(&s, &ep.slug, op, key, target.as_str().unwrap());
            assert_eq!(
                (r.status, r.error_code().as_deref()),
                (403, Some("endpoint_inactive")),
                "{} with {kind} on an inactive endpoint: {}",
                op.name(),
                r.describe()
            );
        }
    }

    set_active(&s, &ep.slug, true);
    assert_eq!(
        s.list_all(&ep.slug, &ep.sandbox_key, 30).0,
        sandbox_before,
        "refused calls on the inactive endpoint changed sandbox records"
    );
    assert_eq!(
        s.list_all(&ep.slug, &ep.production_key, 30).0,
        production_before,
        "refused calls on the inactive endpoint changed production records"
    );
    let (sandbox_after, production_after) = usage_totals(&s, &ep.slug);
    // Only the two one-page listings just above are counted.
    assert_eq!(
        (sandbox_after, production_after),
        (usage_before.0 + 1, usage_before.1 + 1),
        "refused calls on the inactive endpoint were counted in the usage"
    );

    let m = Matrix {
        s: &s,
        slug: &ep.slug,
        watch: vec![ep.sandbox_key.clone(), ep.production_key.clone()],
    };
    for (kind, key) in keys {
        let seed = if key.starts_with("tm_live_") {
            &ep.production_key
        } else {
            &ep.sandbox_key
        };
        m.row(
            &format!("{kind} after reactivation"),
            key,
            seed,
            all(Want::Allowed),
        );
    }
}

#[test]
fn suspended_collaborators_keys_are_refused_until_reinstated() {
    let s = TestServer::start();
    let ep = s.create_endpoint("matrix", &[]);
    let c = add_collaborator(&s, &ep.slug, "suspended@example.com", &PERMISSIONS);
    s.deploy(&ep.slug);
    let production_key = shown_production_key(&s, &c, &ep.slug)
        .as_str()
        .expect("production key")
        .to_string();
    let m = Matrix {
        s: &s,
        slug: &ep.slug,
        watch: vec![ep.sandbox_key.clone(), ep.production_key.clone()],
    };

    set_suspended(&s, &c, true);
    let suspended = Want::Refused(403, "account_suspended");
    m.row(
        "suspended collaborator's sandbox key",
        &c.sandbox_key,
        &ep.sandbox_key,
        all(suspended),
    );
    m.row(
        "suspended collaborator's production key",
        &production_key,
        &ep.production_key,
        all(suspended),
    );
    // The owner's keys are not affected by a collaborator's suspension.
    m.row(
        "owner sandbox key while a collaborator is suspended",
        &ep.sandbox_key,
        &ep.sandbox_key,
        all(Want::Allowed),
    );

    set_suspended(&s, &c, false);
    m.row(
        "reinstated collaborator's sandbox key",
        &c.sandbox_key,
        &ep.sandbox_key,
        all(Want::Allowed),
    );
    m.row(
        "reinstated collaborator's production key",
        &production_key,
        &ep.production_key,
        all(Want::Allowed),
    );
}

#[test]
fn refusals_follow_the_documented_check_order() {
    let s = TestServer::start();
    let ep = s.create_endpoint("matrix", &[]);
    let other = s.create_endpoint("other", &[]);
    let c = add_collaborator(&s, &ep.slug, "order@example.com", &["create"]);
    let m = Matrix {
        s: &s,
        slug: &ep.slug,
        watch: vec![ep.sandbox_key.clone()],
    };

    // A key of another endpoint names nothing here: 404 before anything else is said.
    let wrong_endpoint = Matrix {
        s: &s,
        slug: &other.slug,
        watch: vec![other.sandbox_key.clone()],
    };
    wrong_endpoint.row(
        "a collaboration key of another endpoint",
        &c.sandbox_key,
        &other.sandbox_key,
        all(Want::Refused(404, "endpoint_not_found")),
    );

    // Inactive endpoint, suspended holder, missing permissions: inactive wins.
    set_suspended(&s, &c, true);
    set_active(&s, &ep.slug, false);
    for op in OPS {
        let r = perform(&s, &ep.slug, op, &c.sandbox_key, &unknown_record_id());
        assert_eq!(
            (r.status, r.error_code().as_deref()),
            (403, Some("endpoint_inactive")),
            "{} with a suspended [create] key on an inactive endpoint: {}",
            op.name(),
            r.describe()
        );
        let r = perform(&s, &ep.slug, op, &ep.production_key, &unknown_record_id());
        assert_eq!(
            (r.status, r.error_code().as_deref()),
            (403, Some("endpoint_inactive")),
            "{} with the owner production key on an inactive, undeployed endpoint: {}",
            op.name(),
            r.describe()
        );
    }
    // Active again: the suspension comes before the missing permission.
    set_active(&s, &ep.slug, true);
    m.row(
        "suspended collaboration key [create]",
        &c.sandbox_key,
        &ep.sandbox_key,
        all(Want::Refused(403, "account_suspended")),
    );
    // Reinstated: only the permission is left to say no.
    set_suspended(&s, &c, false);
    m.row(
        "collaboration key [create]",
        &c.sandbox_key,
        &ep.sandbox_key,
        by_permissions(&["create"]),
    );
}
