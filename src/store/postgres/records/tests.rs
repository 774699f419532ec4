//! The PostgreSQL batch apply's own tests: its SQL, and several nodes at once.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::super::webhooks::tests::two_nodes;
use super::super::{PgStore, PgTx, test_cluster, test_node, test_node_on};
use crate::core::clock::Timestamp;
use crate::store::Partition;
use crate::store::conformance::records::{
    OwnerHooks, apply, create, create_keyed, ids, replace, rid,
};
use crate::store::records::{
    BatchWrite, IdempotencyClaim, KEYED_HASH_PREFIX, NewRecord, RecordWrite, RecordsStore,
    WriteOutcome, searchable_text,
};

#[test]
fn the_searchable_text_is_kept_beside_each_record() {
    let store = test_node();
    let a = rid(1000, 1);
    let text = "{\"City\":\"BERLIN \\u0000 Ärger\"}\u{0}";
    apply(&store, &[create(Partition::from_raw(2), a, text)]);
    let folded = |store: &PgStore| -> String {
        let tx = PgTx::read(store).unwrap();
        tx.query_opt("SELECT folded FROM records", &[])
            .unwrap()
            .unwrap()
            .get(0)
    };
    assert_eq!(folded(&store), "{\"city\":\"berlin \\u0000 ärger\"} ");
    assert_eq!(folded(&store), searchable_text(text.as_bytes()));
    apply(
        &store,
        &[replace(Partition::from_raw(2), a, 2000, "{\"Q\":\"ΣΑΣ\"}")],
    );
    assert_eq!(folded(&store), "{\"q\":\"σασ\"}");
}

#[test]
fn purge_idempotency_before_forgets_the_oldest_claims() {
    let store = test_node();
    let hour = Duration::from_secs(3600);
    let keyed = |micros, key: &str| RecordWrite::Create {
        partition: Partition::from_raw(2),
        records: vec![NewRecord {
            id: rid(micros, 0),
            payload: b"{}".to_vec(),
        }],
        idempotency: Some(IdempotencyClaim {
            key: key.into(),
            payload_hash: format!("{KEYED_HASH_PREFIX}h"),
            legacy_payload_hash: "plain h".into(),
            ttl: hour,
        }),
    };
    apply(&store, &[keyed(300, "c"), keyed(100, "a"), keyed(200, "b")]);
    assert_eq!(
        store.purge_idempotency_before(Timestamp(300), 0).unwrap(),
        0
    );
    assert_eq!(
        store.purge_idempotency_before(Timestamp(300), 1).unwrap(),
        1
    );
    let claims = |store: &PgStore| -> Vec<String> {
        let tx = PgTx::read(store).unwrap();
        let rows = tx
            .query("SELECT key FROM idempotency ORDER BY key", &[])
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    };
    assert_eq!(claims(&store), vec!["b", "c"]);
    assert_eq!(
        store.purge_idempotency_before(Timestamp(300), 10).unwrap(),
        1
    );
    assert_eq!(
        store.purge_idempotency_before(Timestamp(300), 10).unwrap(),
        0
    );
    assert_eq!(claims(&store), vec!["c"]);
    // A forgotten key makes a new record; a held one still answers.
    let applied = apply(&store, &[keyed(400, "a"), keyed(401, "c")]);
    assert_eq!(
        applied.outcomes,
        vec![
            WriteOutcome::Created {
                ids: vec![rid(400, 0)]
            },
            WriteOutcome::Replayed {
                ids: vec![rid(300, 0)]
            },
        ]
    );
}

#[test]
fn a_node_gone_silent_inside_a_transaction_holds_its_rows_only_briefly() {
    // Node one is cut off after its batch claimed a key and before its COMMIT arrived:
    // its session holds the claim's row and says nothing more. A client retries the same
    // key on node two, whose write needs that row.
    let (one, two) = two_nodes();
    let silent = PgTx::write(&one).unwrap();
    silent
        .execute(
            "INSERT INTO idempotency (partition, key, created_at, data) \
             VALUES (2, 'retried', 1, '\\x7b7d')",
            &[],
        )
        .unwrap();
    let write = create_keyed(Partition::from_raw(2), rid(1000, 1), "retried", "h");
    let batch = [BatchWrite {
        write: &write,
        webhooks: &OwnerHooks,
    }];
    // The server ends the silent session within half of request_timeout, so the write
    // goes through before its own deadline (request_timeout) instead of failing on it.
    let mut applied = two.apply_batch(&batch).unwrap();
    assert!(
        matches!(applied.outcomes.remove(0), WriteOutcome::Created { .. }),
        "the key was held by a transaction that never committed"
    );
    assert!(
        silent.execute("SELECT 1", &[]).is_err(),
        "the silent session was not ended"
    );
    drop(silent);
    assert_eq!(ids(&two, Partition::from_raw(2)), vec![rid(1000, 1).0]);
}

#[test]
fn a_batch_waits_longer_for_the_database_the_more_payload_it_carries() {
    // A second session locks the records table against writes for 1.5 s, once for a batch of
    // 4 MB and once for one of a few bytes. With request_timeout at 1 s, the large batch has
    // about 5 s (a second more per MiB) and goes through once the lock is gone; the small one
    // gives up at 1 s: the database did not answer it in a request's time.
    let cluster = test_cluster::shared();
    let url = cluster.database();
    let store = test_node_on(url.clone(), |config| {
        config.request_timeout = Duration::from_secs(1);
    });
    let partition = Partition::from_raw(2);
    let pad = "p".repeat(100_000);
    let large = RecordWrite::Create {
        partition,
        records: (0..40)
            .map(|n| NewRecord {
                id: rid(1000, n),
                payload: format!("{{\"pad\":\"{pad}\"}}").into_bytes(),
            })
            .collect(),
        idempotency: None,
    };
    let small = create(partition, rid(2000, 0), "{}");
    let while_locked = |write: &RecordWrite| {
        let mut held = cluster.hold_transaction(test_cluster::database_name(&url));
        held.run("LOCK TABLE records IN SHARE MODE; SELECT 1;");
        std::thread::scope(|scope| {
            let batch = scope.spawn(|| {
                store.apply_batch(&[BatchWrite {
                    write,
                    webhooks: &OwnerHooks,
                }])
            });
            std::thread::sleep(Duration::from_millis(1500));
            held.commit();
            batch.join().unwrap()
        })
    };
    let applied = while_locked(&large).unwrap();
    assert_eq!(
        applied.outcomes,
        vec![WriteOutcome::Created {
            ids: (0..40).map(|n| rid(1000, n)).collect()
        }]
    );
    let refused = while_locked(&small).unwrap_err();
    assert!(
        refused.to_string().contains("no answer within 1s"),
        "{refused}"
    );
    assert_eq!(ids(&store, partition).len(), 40);
}

#[test]
fn two_nodes_racing_one_key_make_one_record() {
    let (one, two) = two_nodes();
    let rounds = 8;
    let barrier = Arc::new(Barrier::new(2));
    let race = |store: &PgStore, node: u64| {
        let mut outcomes = Vec::new();
        for round in 0..rounds {
            let write = create_keyed(
                Partition::from_raw(2),
                rid(1000, round * 2 + node),
                &format!("race-{round}"),
                "h",
            );
            let batch = [BatchWrite {
                write: &write,
                webhooks: &OwnerHooks,
            }];
            barrier.wait();
            // Kept to the end: a thread that panicked here would leave the other waiting.
            outcomes.push(store.apply_batch(&batch).map(|mut a| a.outcomes.remove(0)));
        }
        outcomes.into_iter().collect::<Result<Vec<_>, _>>().unwrap()
    };
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| race(&one, 0));
        let second = scope.spawn(|| race(&two, 1));
        (first.join().unwrap(), second.join().unwrap())
    });
    for (a, b) in first.iter().zip(&second) {
        let (created, replayed) = match (a, b) {
            (WriteOutcome::Created { ids }, WriteOutcome::Replayed { ids: r })
            | (WriteOutcome::Replayed { ids: r }, WriteOutcome::Created { ids }) => (ids, r),
            other => panic!("not one create and one replay: {other:?}"),
        };
        assert_eq!(created, replayed);
    }
    assert_eq!(ids(&one, Partition::from_raw(2)).len(), rounds as usize);
}
