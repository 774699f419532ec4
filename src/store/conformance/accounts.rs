//! Accounts, tokens, sessions and notifications (`store::accounts`).

use std::sync::Barrier;

use crate::core::clock::Timestamp;
use crate::store::{
    AccountRow, IdKind, NotificationRow, PasswordResetRow, Role, SessionRow, Store, StoreError,
    TokenRow, write,
};

pub(crate) fn account(id: u64, email: &str) -> AccountRow {
    AccountRow {
        id,
        email: email.into(),
        password_hash: "hash".into(),
        role: Role::Member,
        created_at: Timestamp(1_000),
        suspended: false,
    }
}

pub(crate) fn token(account_id: u64, name: &str) -> TokenRow {
    TokenRow {
        account_id,
        name: name.into(),
        created_at: Timestamp(2_000),
        expires_at: None,
    }
}

pub(crate) fn session(account_id: u64, expires_at: i64) -> SessionRow {
    SessionRow {
        account_id,
        created_at: Timestamp(0),
        expires_at: Timestamp(expires_at),
    }
}

pub(crate) fn notification(id: u64, message: &str) -> NotificationRow {
    NotificationRow {
        id,
        kind: "endpoint_deployed".into(),
        endpoint_slug: "orders".into(),
        message: message.into(),
        created_at: Timestamp(3_000),
        read_at: None,
        resolution: None,
    }
}

pub(crate) fn access_counter(store: &dyn Store) -> u64 {
    store.read().unwrap().access_version().unwrap()
}

pub(crate) fn insert_accounts(store: &dyn Store, emails: &[&str]) -> Vec<u64> {
    let (ids, _) = write(store, |tx| {
        let mut ids = Vec::new();
        for email in emails {
            let id = tx.next_id(IdKind::Account)?;
            tx.insert_account(&account(id, email))?;
            ids.push(id);
        }
        Ok::<_, StoreError>(ids)
    })
    .unwrap();
    ids
}

pub fn accounts_are_found_by_id_and_email_and_paged_oldest_first(store: &dyn Store) {
    assert!(!store.read().unwrap().any_account().unwrap());
    let ids = insert_accounts(store, &["a@x.test", "b@x.test", "c@x.test", "d@x.test"]);
    let read = store.read().unwrap();
    assert!(read.any_account().unwrap());
    assert_eq!(read.account(ids[1]).unwrap().unwrap().email, "b@x.test");
    assert!(read.account(ids[3] + 1).unwrap().is_none());
    assert_eq!(
        read.account_by_email("c@x.test").unwrap().unwrap().id,
        ids[2]
    );
    assert!(read.account_by_email("e@x.test").unwrap().is_none());
    let page = |after, limit| -> Vec<u64> {
        read.accounts_page(after, limit)
            .unwrap()
            .iter()
            .map(|a| a.id)
            .collect()
    };
    assert_eq!(page(0, 10), ids);
    assert_eq!(page(0, 2), ids[..2]);
    assert_eq!(page(ids[1], 10), ids[2..]);
    assert_eq!(page(ids[3], 10), Vec::<u64>::new());
    assert_eq!(page(0, 0), Vec::<u64>::new());
    assert_eq!(page(u64::MAX, 10), Vec::<u64>::new());
}

pub fn account_writes_report_access_changed_and_bump_the_counter_once_per_commit(
    store: &dyn Store,
) {
    let before = access_counter(store);
    let ids = insert_accounts(store, &["a@x.test"]);
    assert_eq!(access_counter(store), before + 1);

    let ((), effects) = write(store, |tx| {
        let mut row = tx.account(ids[0])?.unwrap();
        row.suspended = true;
        tx.put_account(&row)?;
        // The transaction reads its own change.
        assert!(tx.account(ids[0])?.unwrap().suspended);
        assert!(tx.account_by_email("a@x.test")?.unwrap().suspended);
        row.password_hash = "new".into();
        tx.put_account(&row)
    })
    .unwrap();
    assert!(effects.access_changed);
    assert!(!effects.mail_queued && !effects.deliveries_due);
    assert_eq!(access_counter(store), before + 2);
    let row = store.read().unwrap().account(ids[0]).unwrap().unwrap();
    assert!(row.suspended);
    assert_eq!(row.password_hash, "new");

    // Tokens, sessions and notifications change no access.
    let ((), effects) = write(store, |tx| {
        tx.insert_token(&[1; 32], &token(ids[0], "ci"))?;
        tx.insert_session(&[2; 32], &session(ids[0], 10))?;
        tx.put_notification(ids[0], &notification(1, "hi"))
    })
    .unwrap();
    assert!(!effects.access_changed);
    assert_eq!(access_counter(store), before + 2);
}

pub fn tokens_are_found_by_hash_and_by_account(store: &dyn Store) {
    write(store, |tx| {
        tx.insert_token(&[3; 32], &token(1, "b"))?;
        tx.insert_token(&[1; 32], &token(1, "a"))?;
        tx.insert_token(&[2; 32], &token(2, "other"))?;
        // Seen by the transaction that wrote them.
        assert_eq!(tx.tokens(1)?.len(), 2);
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let read = store.read().unwrap();
    assert_eq!(read.token(&[1; 32]).unwrap().unwrap().name, "a");
    assert!(read.token(&[9; 32]).unwrap().is_none());
    let mine: Vec<([u8; 32], String)> = read
        .tokens(1)
        .unwrap()
        .into_iter()
        .map(|(hash, row)| (hash, row.name))
        .collect();
    assert_eq!(mine, [([1; 32], "a".into()), ([3; 32], "b".into())]);
    assert!(read.tokens(3).unwrap().is_empty());
    drop(read);

    write(store, |tx| {
        tx.delete_token(&[1; 32])?;
        assert!(tx.token(&[1; 32])?.is_none());
        tx.delete_token(&[9; 32])
    })
    .unwrap();
    let read = store.read().unwrap();
    assert!(read.token(&[1; 32]).unwrap().is_none());
    assert_eq!(read.tokens(1).unwrap().len(), 1);
}

pub fn sessions_are_listed_by_account(store: &dyn Store) {
    write(store, |tx| {
        tx.insert_session(&[1; 32], &session(1, 100))?;
        tx.insert_session(&[2; 32], &session(2, 200))?;
        tx.insert_session(&[3; 32], &session(1, 300))?;
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let read = store.read().unwrap();
    let mut mine: Vec<(u8, i64)> = read
        .sessions(1)
        .unwrap()
        .into_iter()
        .map(|(hash, row)| (hash[0], row.expires_at.0))
        .collect();
    mine.sort_unstable();
    assert_eq!(mine, [(1, 100), (3, 300)]);
    assert!(read.sessions(9).unwrap().is_empty());
}

pub fn password_resets_are_found_by_hash_and_deleted_by_account(store: &dyn Store) {
    let reset = |account_id| PasswordResetRow {
        account_id,
        created_at: Timestamp(0),
        expires_at: Timestamp(1_800),
    };
    write(store, |tx| {
        tx.insert_password_reset(&[1; 32], &reset(1))?;
        tx.insert_password_reset(&[2; 32], &reset(1))?;
        tx.insert_password_reset(&[3; 32], &reset(2))?;
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let read = store.read().unwrap();
    let found = read.password_reset(&[2; 32]).unwrap().unwrap();
    assert_eq!((found.account_id, found.expires_at), (1, Timestamp(1_800)));
    assert!(read.password_reset(&[4; 32]).unwrap().is_none());
    drop(read);

    write(store, |tx| tx.delete_password_resets_of(1)).unwrap();
    let read = store.read().unwrap();
    assert!(read.password_reset(&[1; 32]).unwrap().is_none());
    assert!(read.password_reset(&[2; 32]).unwrap().is_none());
    assert!(read.password_reset(&[3; 32]).unwrap().is_some());
}

pub fn sessions_end_one_by_one_by_account_and_by_expiry(store: &dyn Store) {
    write(store, |tx| {
        tx.insert_session(&[1; 32], &session(1, 100))?;
        tx.insert_session(&[2; 32], &session(1, 200))?;
        tx.insert_session(&[3; 32], &session(1, 300))?;
        tx.insert_session(&[4; 32], &session(2, 100))?;
        tx.insert_session(&[5; 32], &session(2, 300))?;
        tx.insert_session(&[6; 32], &session(3, 300))?;
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let read = store.read().unwrap();
    assert_eq!(
        read.session(&[2; 32]).unwrap().unwrap().expires_at,
        Timestamp(200)
    );
    assert!(read.session(&[7; 32]).unwrap().is_none());
    drop(read);

    write(store, |tx| {
        tx.delete_session(&[7; 32])?;
        tx.delete_sessions_of(1, Some(&[2; 32]))?;
        tx.delete_sessions_of(3, None)?;
        assert!(tx.session(&[1; 32])?.is_none());
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let alive = |store: &dyn Store| -> Vec<u8> {
        let read = store.read().unwrap();
        (1..=6u8)
            .filter(|n| read.session(&[*n; 32]).unwrap().is_some())
            .collect()
    };
    assert_eq!(alive(store), [2, 4, 5]);

    // Expired at `now` means expires_at <= now.
    assert_eq!(store.purge_expired_sessions(Timestamp(99)).unwrap(), 0);
    assert_eq!(store.purge_expired_sessions(Timestamp(200)).unwrap(), 2);
    assert_eq!(alive(store), [5]);
    write(store, |tx| tx.delete_session(&[5; 32])).unwrap();
    assert_eq!(alive(store), Vec::<u8>::new());
}

pub fn notifications_are_listed_newest_first_per_account(store: &dyn Store) {
    write(store, |tx| {
        tx.put_notification(1, &notification(1, "one"))?;
        tx.put_notification(1, &notification(3, "three"))?;
        tx.put_notification(1, &notification(2, "two"))?;
        tx.put_notification(2, &notification(4, "other"))?;
        let mut changed = notification(3, "three");
        changed.read_at = Some(Timestamp(5));
        tx.put_notification(1, &changed)
    })
    .unwrap();
    let read = store.read().unwrap();
    let ids: Vec<u64> = read
        .notifications(1)
        .unwrap()
        .iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(ids, [3, 2, 1]);
    let third = read.notification(1, 3).unwrap().unwrap();
    assert_eq!(third.read_at, Some(Timestamp(5)));
    assert!(read.notification(2, 3).unwrap().is_none());
    assert_eq!(read.notifications(2).unwrap().len(), 1);
    assert!(read.notifications(3).unwrap().is_empty());
}

pub fn concurrent_sign_ups_under_one_email_make_one_account(store: &dyn Store) {
    for round in 0..5 {
        let email = format!("race{round}@x.test");
        let barrier = Barrier::new(2);
        let created: Vec<bool> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        let (created, _) = write(store, |tx| {
                            if tx.account_by_email(&email)?.is_some() {
                                return Ok::<_, StoreError>(false);
                            }
                            let id = tx.next_id(IdKind::Account)?;
                            tx.insert_account(&account(id, &email))?;
                            Ok(true)
                        })
                        .unwrap();
                        created
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(created.iter().filter(|c| **c).count(), 1, "{created:?}");
    }
    assert_eq!(
        store.read().unwrap().accounts_page(0, 100).unwrap().len(),
        5
    );
}
