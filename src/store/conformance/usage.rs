//! The data calls' counters (`store::usage`).

use std::sync::Barrier;

use crate::store::usage::CallsDelta;
use crate::store::{Partition, Store};

pub(crate) fn delta(partition: Partition, day: u32, calls: u64) -> CallsDelta {
    CallsDelta {
        partition,
        month: day / 100,
        day,
        calls,
    }
}

pub fn flushes_add_to_the_month_and_day_counters(store: &dyn Store) {
    store.add_calls(&[]).unwrap();
    store
        .add_calls(&[
            delta(Partition::from_raw(1), 20240131, 5),
            delta(Partition::from_raw(1), 20240201, 7),
            // The same day twice in one flush.
            delta(Partition::from_raw(1), 20240201, 1),
            delta(Partition::from_raw(2), 20240201, 100),
            delta(Partition::from_raw(1), 20240410, 2),
        ])
        .unwrap();
    store
        .add_calls(&[
            delta(Partition::from_raw(1), 20240131, 10),
            delta(Partition::from_raw(1), 20240203, 3),
        ])
        .unwrap();
    assert_eq!(
        store
            .monthly_calls(Partition::from_raw(1), 202401..=202412)
            .unwrap(),
        [(202401, 15), (202402, 11), (202404, 2)]
    );
    assert_eq!(
        store
            .monthly_calls(Partition::from_raw(1), 202402..=202403)
            .unwrap(),
        [(202402, 11)]
    );
    assert_eq!(
        store
            .monthly_calls(Partition::from_raw(2), 0..=u32::MAX)
            .unwrap(),
        [(202402, 100)]
    );
    assert_eq!(
        store
            .monthly_calls(Partition::from_raw(3), 0..=u32::MAX)
            .unwrap(),
        []
    );
    assert_eq!(
        store
            .daily_calls(Partition::from_raw(1), 20240101..=20240228)
            .unwrap(),
        [(20240131, 15), (20240201, 8), (20240203, 3)]
    );
    assert_eq!(
        store
            .daily_calls(Partition::from_raw(1), 20240201..=20240201)
            .unwrap(),
        [(20240201, 8)]
    );
    let (from, to) = (20240202, 20240201);
    assert_eq!(
        store
            .daily_calls(Partition::from_raw(1), from..=to)
            .unwrap(),
        []
    );
}

pub fn concurrent_flushes_from_several_nodes_all_count(store: &dyn Store) {
    const FLUSHES: u64 = 40;
    let barrier = Barrier::new(2);
    std::thread::scope(|scope| {
        for node in 0..2u64 {
            let (store, barrier) = (store, &barrier);
            scope.spawn(move || {
                barrier.wait();
                for _ in 0..FLUSHES {
                    // Shared counters, in opposite orders, and one of the node's own.
                    let mut deltas = vec![
                        delta(Partition::from_raw(1), 20240501, 1),
                        delta(Partition::from_raw(1), 20240502, 2),
                        delta(Partition::from_raw(10 + node), 20240501, 1),
                    ];
                    if node == 1 {
                        deltas.reverse();
                    }
                    store.add_calls(&deltas).unwrap();
                }
            });
        }
    });
    assert_eq!(
        store
            .monthly_calls(Partition::from_raw(1), 202405..=202405)
            .unwrap(),
        [(202405, 2 * FLUSHES * 3)]
    );
    assert_eq!(
        store
            .daily_calls(Partition::from_raw(1), 20240501..=20240531)
            .unwrap(),
        [(20240501, 2 * FLUSHES), (20240502, 2 * FLUSHES * 2)]
    );
    for node in 0..2 {
        assert_eq!(
            store
                .monthly_calls(Partition::from_raw(10 + node), 0..=u32::MAX)
                .unwrap(),
            [(202405, FLUSHES)]
        );
    }
}
