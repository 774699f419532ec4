//! Purges (`store::purge`): retention's share of the delivery log.

use crate::core::clock::Timestamp;
use crate::store::records::{Change, DeliveryPlanner, NewDelivery};
use crate::store::webhooks::AfterAttempt;
use crate::store::{
    EventType, Partition, Store, StoreError, WebhookKind, WebhookSettingsRow, write,
};

use super::records::{apply_planned, create, rid};
use super::webhooks::outcome;

/// The record number (`rid(_, SKIPPED)`) whose delivery is written as skipped.
const SKIPPED: u64 = 99;

/// One owner delivery per change, made when its record was (the time in its id), skipped for
/// record number [`SKIPPED`].
struct MadeWithTheRecord;

impl DeliveryPlanner for MadeWithTheRecord {
    fn deliveries(
        &self,
        change: &Change<'_>,
        _: Option<&WebhookSettingsRow>,
    ) -> Result<Vec<NewDelivery>, StoreError> {
        Ok(vec![NewDelivery {
            kind: WebhookKind::Owner,
            event: EventType::RecordCreated,
            subscription: Some(1),
            skipped: change.id.0 as u64 == SKIPPED,
            url: "http://hooks.test/in".into(),
            receiver: "http://hooks.test:80".into(),
            auth_header: None,
            auth_value_sealed: None,
            body: "{}".into(),
            sender: None,
            trace: None,
            max_attempts: 3,
            created_at: Timestamp((change.id.0 >> 64) as i64),
        }])
    }
}

/// Creates a record of `partition` at each time of `made`, `(micros, number)`, with its
/// delivery; returns the deliveries' ids, in the same order.
fn deliveries_made(store: &dyn Store, partition: Partition, made: &[(i64, u64)]) -> Vec<u64> {
    let writes: Vec<_> = made
        .iter()
        .map(|&(at, n)| create(partition, rid(at, n), "{}"))
        .collect();
    apply_planned(store, &writes, &MadeWithTheRecord);
    let mut ids = listed(store, partition);
    ids.reverse();
    ids.split_off(ids.len() - made.len())
}

/// The ids of `partition`'s deliveries, newest first.
fn listed(store: &dyn Store, partition: Partition) -> Vec<u64> {
    let page = store
        .read()
        .unwrap()
        .delivery_page(partition, None, u64::MAX, 100);
    page.unwrap().iter().map(|d| d.id).collect()
}

/// Records attempt `number` of delivery `id`, which leads to `next`.
fn attempted(store: &dyn Store, id: u64, number: u32, next: AfterAttempt) {
    let outcome = outcome(id, number, next);
    write(store, |tx| {
        tx.record_outcomes(std::slice::from_ref(&outcome))
    })
    .unwrap();
}

fn retry_at(at: i64) -> AfterAttempt {
    AfterAttempt::Retry {
        at: Timestamp(at),
        answered_at: Timestamp(at - 1),
        receiver: "http://hooks.test:80".into(),
    }
}

/// Finished deliveries made before the cutoff go with their attempts and index entries,
/// oldest first and `limit` at a time; pending ones stay until they finish, newer ones stay,
/// and other partitions are left alone.
pub fn purge_deliveries_before_takes_the_finished_ones_made_before_the_cutoff(store: &dyn Store) {
    let ids = deliveries_made(
        store,
        Partition::from_raw(2),
        &[(10, 1), (20, 2), (30, 3), (40, SKIPPED), (50, 5), (60, 6)],
    );
    let [
        delivered,
        pending,
        given_up,
        skipped,
        recent,
        recent_pending,
    ] = ids[..]
    else {
        panic!("six deliveries: {ids:?}");
    };
    let other = deliveries_made(store, Partition::from_raw(3), &[(10, 1)]);
    attempted(
        store,
        delivered,
        1,
        AfterAttempt::Delivered { at: Timestamp(11) },
    );
    attempted(store, pending, 1, retry_at(25));
    attempted(store, given_up, 1, retry_at(32));
    attempted(
        store,
        given_up,
        2,
        AfterAttempt::GivenUp { at: Timestamp(33) },
    );
    attempted(
        store,
        recent,
        1,
        AfterAttempt::Delivered { at: Timestamp(51) },
    );
    attempted(
        store,
        other[0],
        1,
        AfterAttempt::Delivered { at: Timestamp(11) },
    );
    assert_eq!(
        store.delivery_partitions().unwrap(),
        [2, 3].map(Partition::from_raw)
    );

    let cutoff = Timestamp(45);
    assert_eq!(
        store
            .purge_deliveries_before(Partition::from_raw(2), cutoff, 0)
            .unwrap(),
        0
    );
    // The oldest two finished ones, passing over the pending one between them.
    assert_eq!(
        store
            .purge_deliveries_before(Partition::from_raw(2), cutoff, 2)
            .unwrap(),
        2
    );
    assert_eq!(
        listed(store, Partition::from_raw(2)),
        [recent_pending, recent, skipped, pending]
    );
    assert_eq!(
        store
            .purge_deliveries_before(Partition::from_raw(2), cutoff, 10)
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .purge_deliveries_before(Partition::from_raw(2), cutoff, 10)
            .unwrap(),
        0
    );

    let read = store.read().unwrap();
    assert_eq!(
        listed(store, Partition::from_raw(2)),
        [recent_pending, recent, pending]
    );
    for gone in [delivered, given_up, skipped] {
        assert!(read.delivery(gone).unwrap().is_none(), "{gone}");
        assert!(read.delivery_attempts(gone).unwrap().is_empty(), "{gone}");
    }
    let of_record = |n: u64| {
        read.delivery_page(
            Partition::from_raw(2),
            Some(rid(n as i64 * 10, n).0),
            u64::MAX,
            10,
        )
    };
    assert!(of_record(1).unwrap().is_empty());
    assert_eq!(of_record(2).unwrap().len(), 1);
    assert_eq!(read.delivery_attempts(pending).unwrap().len(), 1);
    assert_eq!(read.delivery_attempts(recent).unwrap().len(), 1);
    let due: Vec<u64> = read
        .due_deliveries(Timestamp(100), None, 10)
        .unwrap()
        .iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(due, [pending, recent_pending]);
    assert_eq!(listed(store, Partition::from_raw(3)), other);
    drop(read);

    // Once finished, the pending one goes with the next purge.
    attempted(
        store,
        pending,
        2,
        AfterAttempt::Delivered { at: Timestamp(70) },
    );
    assert_eq!(
        store
            .purge_deliveries_before(Partition::from_raw(2), cutoff, 10)
            .unwrap(),
        1
    );
    assert_eq!(
        listed(store, Partition::from_raw(2)),
        [recent_pending, recent]
    );
    assert!(
        store
            .read()
            .unwrap()
            .delivery_attempts(pending)
            .unwrap()
            .is_empty()
    );

    // A partition whose deliveries are all gone is no longer listed.
    let end = Timestamp(i64::MAX);
    assert_eq!(
        store
            .purge_deliveries_before(Partition::from_raw(3), end, 10)
            .unwrap(),
        1
    );
    assert_eq!(
        store.delivery_partitions().unwrap(),
        [Partition::from_raw(2)]
    );
}
