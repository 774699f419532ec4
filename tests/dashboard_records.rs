//! The record browser as a data console (issue #42, item 6), in a real headless Chromium
//! against a server on a manual clock: records as a table whose columns are the payload's
//! fields (the schema's properties, else the page's top-level keys; nested values by their
//! size, numbers as stored), newest or oldest first page by page, within a date range that
//! applies to browsing, search and the export; the column choice kept per endpoint across a
//! reload; and records created and replaced from a JSON editor that checks the text before
//! sending, while the server checks it again with the API's rules, keeps the text of a
//! refused payload, audits the write and queues it for webhooks. Collaborators without the
//! permission see no buttons and are refused. Every page passes axe-core in both schemes and
//! fits a phone.

use crate::common::{self, browser};

use std::time::Duration;

use browser::{Browser, Session};
use common::in_process::{InProcessServer, at};
use common::receiver::{Receiver, Reply};
use common::{
    COLLABORATOR_PASSWORD, OWNER_EMAIL, Resp, ServerClient, add_collaborator, assert_status,
    session_cookie,
};
use serde_json::{Value, json};

const START: &str = "2026-11-01T10:00:00Z";

fn server() -> InProcessServer {
    InProcessServer::start("[webhooks]\nallow_private_targets = true\n", at(START))
}

fn log_in<'b>(
    browser: &'b Browser,
    s: &InProcessServer,
    email: &str,
    password: &str,
) -> Session<'b> {
    let session = browser.session(&s.base_url());
    session.login(email, password);
    session
}

/// A session cookie of `email`, for what a browser cannot tell (a page's status, a file).
fn cookie(s: &ServerClient, email: &str, password: &str) -> String {
    let body = json!({ "email": email, "password": password }).to_string();
    let r = s.request(
        "POST",
        "/api/v1/auth/login",
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    );
    assert_status(&r, 200);
    format!("intake_session={}", session_cookie(&r))
}

fn page(s: &ServerClient, cookie: &str, path: &str) -> Resp {
    s.request("GET", path, &[("Cookie", cookie)], None)
}

/// Stores `payload` through the data API with the clock at `time`; returns its id.
fn write_at(s: &InProcessServer, key: &str, slug: &str, time: &str, payload: &Value) -> String {
    s.set(time);
    let r = s.data("POST", &format!("/api/v1/data/{slug}"), key, Some(payload));
    assert_eq!(r.status, 202, "{}", r.describe());
    r.json()["id"].as_str().expect("id").to_string()
}

/// The texts of the elements at `selector`, in order.
fn texts(page: &Session, selector: &str) -> Vec<String> {
    let found = page.eval(&format!(
        "JSON.stringify(Array.from(document.querySelectorAll({})).filter(e => !e.hidden).map(e => e.textContent.trim()))",
        json!(selector)
    ));
    serde_json::from_str(found.as_str().expect("JSON text")).expect("texts")
}

fn listed_ids(page: &Session) -> Vec<String> {
    texts(page, "#records tbody tr td:first-child code")
}

/// Every id the table lists from the page it shows on, following the pager's next link.
fn all_pages(page: &Session) -> Vec<String> {
    let mut seen = listed_ids(page);
    while page.exists(".pager a[rel=next]") {
        page.submit(".pager a[rel=next]");
        seen.extend(listed_ids(page));
    }
    seen
}

/// The ids of an export of what the table shows, as its Export form asks for it.
fn exported_ids(s: &ServerClient, cookie: &str, owner: &Session, slug: &str) -> Vec<String> {
    let query = owner
        .eval("new URLSearchParams(new FormData(document.getElementById('export'))).toString()");
    let query = query
        .as_str()
        .expect("query")
        .replace("format=csv", "format=ndjson");
    let r = page(
        s,
        cookie,
        &format!("/dashboard/endpoints/{slug}/records/export?{query}"),
    );
    assert_status(&r, 200);
    r.text()
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).expect("NDJSON line");
            record["id"].as_str().expect("id").to_string()
        })
        .collect()
}

#[test]
fn the_table_shows_the_fields_newest_or_oldest_first_within_dates() {
    let s = server();
    let ep = s.create_endpoint("Orders", &[]);
    // 30 records, one a day from 1 November at 10:00 UTC (the 5th at 23:30), every fifth
    // with a word to search for; one payload is not an object.
    let mut ids = Vec::new();
    for day in 1..=30 {
        let time = match day {
            5 => "2026-11-05T23:30:00Z".to_string(),
            _ => format!("2026-11-{day:02}T10:00:00Z"),
        };
        let payload = match day {
            7 => json!([1, 2]),
            _ => json!({
                "n": day,
                "name": if day % 5 == 0 { format!("needle {day}") } else { format!("item {day}") },
                "address": { "city": "Lyon", "zip": "69001" },
                "tags": ["a", "b", "c"],
                "amount": 123456789012345678901234567890_u128,
                "note": "a long note that goes on and on about the order, its parcel, its path and whoever signed",
            }),
        };
        ids.push(write_at(&s, &ep.sandbox_key, &ep.slug, &time, &payload));
    }
    s.set("2026-12-01T09:00:00Z");
    let browser = Browser::start();
    let owner = log_in(&browser, &s, OWNER_EMAIL, &s.password);
    let owner_cookie = cookie(&s, OWNER_EMAIL, &s.password);
    let records = format!("/dashboard/endpoints/{}/records", ep.slug);

    // The columns are the page's top-level keys in the order first seen, and the payload
    // column for the record that is not an object.
    owner.goto(&records);
    assert_eq!(
        texts(&owner, "#records thead th"),
        [
            "Record",
            "Created (UTC)",
            "n",
            "name",
            "address",
            "tags",
            "amount",
            "note",
            "payload"
        ]
    );
    let newest = owner.eval(
        "JSON.stringify(Array.from(document.querySelectorAll('#records tbody tr:first-child td')).map(td => td.textContent))",
    );
    let newest: Vec<String> = serde_json::from_str(newest.as_str().unwrap()).unwrap();
    assert_eq!(newest[0], ids[29]);
    assert_eq!(newest[1], "2026-11-30 10:00:00 UTC");
    assert_eq!(newest[2], "30");
    assert_eq!(newest[3], "needle 30");
    assert_eq!(newest[4], "{2 keys}");
    assert_eq!(newest[5], "[3 items]");
    assert_eq!(
        newest[6], "123456789012345678901234567890",
        "the number as stored"
    );
    assert!(
        newest[7].starts_with("a long note that goes on and on about the order, its…"),
        "cut at a word with an ellipsis: {}",
        newest[7]
    );
    assert_eq!(newest[8], "");
    let array_row = format!(
        "#records tbody tr:nth-child({}) td[data-col=payload]",
        30 - 7 + 1
    );
    assert_eq!(owner.text(&array_row), "[2 items]");
    // The id opens the whole record.
    owner.submit("#records tbody tr:first-child td:first-child a");
    assert_eq!(owner.text("#record-id"), ids[29]);

    // Newest first, page after page; then oldest first with its own pager.
    owner.goto(&records);
    assert_eq!(texts(&owner, ".pager a"), ["Older"]);
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(all_pages(&owner), newest_first);
    owner.goto(&records);
    owner.eval("document.getElementById('order').value = 'oldest'; true");
    owner.submit(".records-filters button[type=submit]");
    assert_eq!(owner.value("#order"), "oldest");
    assert!(owner.text("#records-about").contains("oldest first"));
    assert_eq!(listed_ids(&owner), ids[..25]);
    assert_eq!(texts(&owner, ".pager a"), ["Newer"]);
    owner.submit(".pager a[rel=next]");
    assert_eq!(listed_ids(&owner), ids[25..]);
    assert_eq!(texts(&owner, ".pager a"), ["Oldest"]);
    // A cursor of one order is refused by the other, beside the form.
    let oldest_cursor = owner.path();
    let swapped = oldest_cursor.replace("order=oldest", "order=newest");
    owner.goto(&swapped);
    assert!(
        owner.text("#filter-error").contains("cursor"),
        "{}",
        owner.text("#filter-error")
    );

    // A date range, both days included in UTC (the 5th's record at 23:30 is in), oldest
    // first; the export takes the same records in the same order.
    owner.goto(&format!("{records}?order=oldest"));
    owner.paste("#from", "2026-11-05");
    owner.paste("#to", "2026-11-08");
    owner.submit(".records-filters button[type=submit]");
    assert_eq!(listed_ids(&owner), ids[4..8]);
    assert!(owner.text("#filters-help").contains("UTC"));
    assert_eq!(exported_ids(&s, &owner_cookie, &owner, &ep.slug), ids[4..8]);
    owner.eval("document.getElementById('order').value = 'newest'; true");
    owner.submit(".records-filters button[type=submit]");
    let newest_in_range: Vec<String> = ids[4..8].iter().rev().cloned().collect();
    assert_eq!(listed_ids(&owner), newest_in_range);
    assert_eq!(
        exported_ids(&s, &owner_cookie, &owner, &ep.slug),
        newest_in_range
    );

    // Search within the dates: newest first, the order choice off and saying why.
    owner.paste("#from", "2026-11-10");
    owner.paste("#to", "2026-11-25");
    owner.paste("#q", "needle");
    owner.submit(".records-filters button[type=submit]");
    assert_eq!(
        listed_ids(&owner),
        [
            ids[24].clone(),
            ids[19].clone(),
            ids[14].clone(),
            ids[9].clone()
        ]
    );
    assert_eq!(
        owner.eval("document.getElementById('order').disabled"),
        json!(true)
    );
    assert!(owner.text("#order-note").contains("newest first"));
    assert_eq!(
        exported_ids(&s, &owner_cookie, &owner, &ep.slug),
        [
            ids[24].clone(),
            ids[19].clone(),
            ids[14].clone(),
            ids[9].clone()
        ]
    );
    owner.screenshots("records-table");
    owner.assert_accessible();

    // Dates that are no dates, or the wrong way round: a 400 and the reason beside the form.
    for (query, words) in [
        ("from=2026-02-30", "“from”"),
        ("to=yesterday", "“to”"),
        ("from=2026-11-09&to=2026-11-02", "after “to”"),
    ] {
        let path = format!("{records}?environment=sandbox&{query}");
        owner.goto(&path);
        let error = owner.text("#filter-error");
        assert!(error.contains(words), "{query}: {error}");
        assert!(!owner.exists("#records"));
        assert_eq!(page(&s, &owner_cookie, &path).status, 400, "{query}");
    }
    owner.assert_accessible();
}

#[test]
fn schema_properties_are_the_columns_and_the_column_choice_survives_a_reload() {
    let s = server();
    let ep = s.create_endpoint("Parcels", &[]);
    s.patch_endpoint(
        &ep.slug,
        &json!({ "schema": {
            "type": "object",
            "properties": {
                "sku": { "type": "string" },
                "qty": { "type": "integer" },
                "dimensions": { "type": "object" },
                "gift": { "type": "boolean" }
            }
        }}),
    );
    write_at(
        &s,
        &ep.sandbox_key,
        &ep.slug,
        "2026-11-02T10:00:00Z",
        &json!({ "qty": 2, "sku": "A-1", "dimensions": { "w": 1, "h": 2, "d": 3 }, "extra": "x" }),
    );
    let browser = Browser::start();
    let owner = log_in(&browser, &s, OWNER_EMAIL, &s.password);
    let records = format!("/dashboard/endpoints/{}/records", ep.slug);
    owner.goto(&records);
    // The schema's order, its properties only (gift, which no record has, included).
    assert_eq!(
        texts(&owner, "#records thead th"),
        [
            "Record",
            "Created (UTC)",
            "sku",
            "qty",
            "dimensions",
            "gift"
        ]
    );
    assert_eq!(
        owner.text("#records td[data-col='field:dimensions']"),
        "{3 keys}"
    );

    // Hide qty with the keyboard and gift with a click: both stay hidden after a reload, in
    // this environment only.
    assert!(owner.visible("#column-chooser"));
    owner.click("#column-chooser summary");
    owner
        .eval("document.querySelector('#column-chooser input[value=\"field:qty\"]').focus(); true");
    owner.press(" ");
    owner.set_checked("#column-chooser input[value='field:gift']", false);
    assert_eq!(
        texts(&owner, "#records thead th"),
        ["Record", "Created (UTC)", "sku", "dimensions"]
    );
    owner.goto(&records);
    assert_eq!(
        texts(&owner, "#records thead th"),
        ["Record", "Created (UTC)", "sku", "dimensions"]
    );
    assert!(!owner.visible("#records td[data-col='field:qty']"));
    assert_eq!(
        owner.eval("document.querySelector('#column-chooser input[value=\"field:qty\"]').checked"),
        json!(false)
    );
    owner.click("#column-chooser summary");
    owner.set_checked("#column-chooser input[value='field:qty']", true);
    owner.goto(&records);
    assert_eq!(
        texts(&owner, "#records thead th"),
        ["Record", "Created (UTC)", "sku", "qty", "dimensions"]
    );
    owner.assert_accessible();
    owner.phone_width();
    owner.assert_fits_width();
    owner.desktop_width();
}

#[test]
fn records_are_created_and_replaced_from_the_editor_checked_before_and_after_sending() {
    let s = server();
    let ep = s.create_endpoint("Stock", &[]);
    s.patch_endpoint(
        &ep.slug,
        &json!({ "schema": {
            "type": "object",
            "required": ["sku", "qty"],
            "properties": {
                "sku": { "type": "string" },
                "qty": { "type": "integer", "minimum": 1 }
            }
        }}),
    );
    let receiver = Receiver::start();
    receiver.always(Reply::status(204));
    let r = s.manage(
        "POST",
        &format!(
            "/api/v1/manage/endpoints/{}/webhooks/sandbox/subscriptions",
            ep.slug
        ),
        Some(&json!({ "url": receiver.url("/hooks") })),
    );
    assert_status(&r, 201);
    let browser = Browser::start();
    let owner = log_in(&browser, &s, OWNER_EMAIL, &s.password);
    owner.goto(&format!("/dashboard/endpoints/{}/records", ep.slug));
    owner.submit("#new-record");
    assert_eq!(owner.text("#editor-title"), "New sandbox record");
    // A skeleton of the required fields, by their schema types.
    let skeleton: Value = serde_json::from_str(&owner.value("#payload")).expect("skeleton JSON");
    assert_eq!(skeleton, json!({ "sku": "", "qty": 0 }));
    owner.screenshots("record-editor");
    owner.assert_accessible();

    // Checked before sending: syntax (with where), required fields, top-level types.
    let before = owner.path();
    for (text, words) in [
        ("{\n  \"sku\": \"A-1\",\n  \"qty\": \n}", "line 4, column 1"),
        ("{\"sku\": \"A-1\"}", "missing the required field “qty”"),
        (
            "{\"sku\": \"A-1\", \"qty\": \"two\"}",
            "“qty” must be integer, not string",
        ),
    ] {
        owner.paste("#payload", text);
        owner.click("#record-editor button[type=submit]");
        assert!(owner.visible("#editor-check"), "{text}");
        let shown = owner.text("#editor-check");
        assert!(shown.contains(words), "{text}: {shown}");
        assert_eq!(owner.path(), before, "nothing was sent");
        assert_eq!(owner.value("#payload"), text);
    }
    owner.assert_accessible();
    // What only the server knows (the minimum): refused beside the form, the text kept.
    let refused = "{\"sku\": \"A-1\", \"qty\": 0}";
    owner.paste("#payload", refused);
    owner.submit("#record-editor button[type=submit]");
    let error = owner.text("#record-editor .error[data-form-error]");
    assert!(
        error.contains("minimum") || error.contains("less than"),
        "{error}"
    );
    assert_eq!(owner.value("#payload"), refused);
    assert!(!owner.visible("#editor-check"));
    owner.assert_accessible();
    let listed = s.data(
        "GET",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        None,
    );
    assert_eq!(listed.json()["data"], json!([]), "nothing was stored");

    // Accepted: the record's page with a flash, the payload as typed (every digit kept).
    owner.paste(
        "#payload",
        "{\"sku\": \"A-1\", \"qty\": 2, \"weight\": 1.50, \"serial\": 123456789012345678901234567890}",
    );
    owner.submit("#record-editor button[type=submit]");
    assert!(
        owner.text(".flash").contains("Record created"),
        "{}",
        owner.text("main")
    );
    let id = owner.text("#record-id");
    assert_eq!(
        owner.text("#record-payload"),
        "{\n  \"sku\": \"A-1\",\n  \"qty\": 2,\n  \"weight\": 1.50,\n  \"serial\": 123456789012345678901234567890\n}"
    );

    // Edit: the stored payload, indented; a replace of it, a minute later.
    s.advance(Duration::from_secs(60));
    owner.submit("#edit-record");
    assert_eq!(
        owner.value("#payload"),
        "{\n  \"sku\": \"A-1\",\n  \"qty\": 2,\n  \"weight\": 1.50,\n  \"serial\": 123456789012345678901234567890\n}"
    );
    owner.screenshots("record-editor-edit");
    owner.paste("#payload", "{\"sku\": \"A-1\", \"qty\": -3}");
    owner.submit("#record-editor button[type=submit]");
    let error = owner.text("#record-editor .error[data-form-error]");
    assert!(!error.is_empty());
    assert_eq!(owner.value("#payload"), "{\"sku\": \"A-1\", \"qty\": -3}");
    owner.paste("#payload", "{\"sku\": \"A-1\", \"qty\": 5}");
    owner.submit("#record-editor button[type=submit]");
    assert!(owner.text(".flash").contains("Record replaced"));
    assert_eq!(
        owner.text("#record-payload"),
        "{\n  \"sku\": \"A-1\",\n  \"qty\": 5\n}"
    );
    let stored = s.data(
        "GET",
        &format!("/api/v1/data/{}/{id}", ep.slug),
        &ep.sandbox_key,
        None,
    );
    assert_eq!(stored.json()["payload"], json!({ "sku": "A-1", "qty": 5 }));
    owner.goto(&format!("/dashboard/endpoints/{}/records", ep.slug));
    assert!(
        owner
            .text("#records tbody tr:first-child")
            .contains("replaced")
    );

    // Both audited with who, which record and where; both announced to webhooks.
    let audit = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
        None,
    );
    let entries = audit.json()["data"].as_array().cloned().unwrap_or_default();
    for action in ["record.created", "record.replaced"] {
        let entry = entries
            .iter()
            .find(|e| e["action"] == action)
            .unwrap_or_else(|| panic!("no {action} in {entries:?}"));
        assert_eq!(entry["actor"]["email"], OWNER_EMAIL);
        assert_eq!(entry["details"]["record_id"], json!(id));
        assert_eq!(entry["details"]["environment"], "sandbox");
    }
    let deliveries = s.manage(
        "GET",
        &format!(
            "/api/v1/manage/endpoints/{}/deliveries?environment=sandbox&limit=100",
            ep.slug
        ),
        None,
    );
    let mut events: Vec<String> = deliveries.json()["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|d| d["record_id"] == json!(id))
        .map(|d| d["event"].as_str().unwrap_or_default().to_string())
        .collect();
    events.sort();
    assert_eq!(
        events,
        ["record.created", "record.replaced"],
        "{}",
        deliveries.text()
    );
}

#[test]
fn only_members_allowed_to_create_or_replace_see_the_buttons_and_may_post() {
    let s = server();
    let ep = s.create_endpoint("Shared", &[]);
    let id = write_at(
        &s,
        &ep.sandbox_key,
        &ep.slug,
        "2026-11-02T10:00:00Z",
        &json!({ "n": 1 }),
    );
    add_collaborator(&s, &ep.slug, "reader@example.com", &["read"]);
    add_collaborator(
        &s,
        &ep.slug,
        "writer@example.com",
        &["read", "create", "replace"],
    );
    let records = format!("/dashboard/endpoints/{}/records", ep.slug);
    let record = format!("{records}/{id}?environment=sandbox");
    let new = format!("{records}/new?environment=sandbox");
    let edit = format!("{records}/{id}/edit?environment=sandbox");
    let browser = Browser::start();

    // A reader: no buttons; the editor pages are refused, and so are posts with the
    // reader's own CSRF token. Nothing changes.
    let reader = log_in(&browser, &s, "reader@example.com", COLLABORATOR_PASSWORD);
    reader.goto(&records);
    assert!(reader.exists("#records"));
    assert!(!reader.exists("#new-record"));
    reader.goto(&record);
    assert!(!reader.exists("#edit-record"));
    let reader_cookie = cookie(&s, "reader@example.com", COLLABORATOR_PASSWORD);
    for path in [&new, &edit] {
        assert_eq!(page(&s, &reader_cookie, path).status, 403, "{path}");
        reader.goto(path);
        assert!(
            reader.text("main").contains("missing_permission"),
            "{}",
            reader.text("main")
        );
        assert!(!reader.exists("#payload"));
    }
    reader.goto(&record);
    assert!(reader.exists("input[name=csrf]"), "the reader's own token");
    for action in [&new, &edit] {
        reader.eval(&format!(
            "(function () {{ var f = document.createElement('form'); f.method = 'post'; \
             f.action = {action}; \
             [['csrf', document.querySelector('input[name=csrf]').value], \
              ['payload', '{{\"n\": 99}}']].forEach(function (p) {{ \
               var i = document.createElement('input'); i.type = 'hidden'; i.name = p[0]; \
               i.value = p[1]; f.appendChild(i); }}); \
             var b = document.createElement('button'); b.type = 'submit'; b.id = 'forged'; \
             f.appendChild(b); document.body.appendChild(f); return true; }})()",
            action = json!(action),
        ));
        reader.submit("#forged");
        let main = reader.text("main");
        assert!(main.contains("missing_permission"), "{action}: {main}");
        reader.goto(&record);
    }
    let listed = s.data(
        "GET",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        None,
    );
    assert_eq!(listed.json()["data"].as_array().map(Vec::len), Some(1));
    let stored = s.data(
        "GET",
        &format!("/api/v1/data/{}/{id}", ep.slug),
        &ep.sandbox_key,
        None,
    );
    assert_eq!(stored.json()["payload"], json!({ "n": 1 }));

    // A writer: both buttons, and the write is audited under the writer's name.
    let writer = log_in(&browser, &s, "writer@example.com", COLLABORATOR_PASSWORD);
    writer.goto(&record);
    writer.submit("#edit-record");
    writer.paste("#payload", "{\"n\": 2}");
    writer.submit("#record-editor button[type=submit]");
    assert!(writer.text(".flash").contains("Record replaced"));
    writer.goto(&records);
    writer.submit("#new-record");
    writer.paste("#payload", "{\"n\": 3}");
    writer.submit("#record-editor button[type=submit]");
    assert!(writer.text(".flash").contains("Record created"));
    let audit = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
        None,
    );
    let by_writer = audit.json()["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["actor"]["email"] == "writer@example.com")
        .map(|e| e["action"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>();
    assert!(
        by_writer.contains(&"record.created".to_string()),
        "{by_writer:?}"
    );
    assert!(
        by_writer.contains(&"record.replaced".to_string()),
        "{by_writer:?}"
    );

    // Production before the deploy: no button, and the editor is refused as a production
    // key would be; after it, the owner creates there.
    let owner = log_in(&browser, &s, OWNER_EMAIL, &s.password);
    let production = format!("{records}?environment=production");
    owner.goto(&production);
    assert!(!owner.exists("#new-record"));
    let owner_cookie = cookie(&s, OWNER_EMAIL, &s.password);
    let new_production = format!("{records}/new?environment=production");
    let r = page(&s, &owner_cookie, &new_production);
    assert_eq!(r.status, 403);
    assert!(r.text().contains("endpoint_not_deployed"));
    s.deploy(&ep.slug);
    owner.goto(&production);
    owner.submit("#new-record");
    assert_eq!(owner.text("#editor-title"), "New production record");
    owner.paste("#payload", "{\"n\": 4}");
    owner.submit("#record-editor button[type=submit]");
    assert!(owner.text(".flash").contains("Record created"));
    assert!(owner.path().contains("environment=production"));
}
