//! Endpoints, keys, collaborators, invitations and the audit log (`store::endpoints`).

use std::sync::Barrier;

use crate::core::clock::Timestamp;
use crate::store::{
    ApiKeyRow, AuditRow, CollaboratorRow, EndpointRow, Environment, IdKind, InvitationRow,
    InvitationStatus, Permission, Store, StoreError, WriteTx, write,
};

pub(crate) fn endpoint(id: u64, slug: &str, owner_id: u64) -> EndpointRow {
    EndpointRow {
        id,
        slug: slug.into(),
        name: slug.into(),
        description: None,
        required_fields: vec![],
        schema: None,
        retention: Default::default(),
        active: true,
        deployed: false,
        deployed_at: None,
        created_at: Timestamp(1_000),
        owner_id,
        deploy_request: None,
        deploy_rejection: None,
        monthly_quota: None,
        sandbox_key_sealed: vec![1, 2],
        production_key_sealed: vec![3, 4],
        previous_keys: vec![],
        deleted_at: None,
        purged: false,
    }
}

pub(crate) fn collaborator(endpoint_id: u64, account_id: u64) -> CollaboratorRow {
    CollaboratorRow {
        endpoint_id,
        account_id,
        permissions: vec![Permission::Read],
        invitation_id: 1,
        added_at: Timestamp(2_000),
        sandbox_key_sealed: vec![5],
        production_key_sealed: vec![6],
        previous_keys: vec![],
    }
}

pub(crate) fn api_key(endpoint_id: u64, key_id: &str) -> ApiKeyRow {
    ApiKeyRow {
        key_id: key_id.into(),
        endpoint_id,
        environment: Environment::Sandbox,
        created_at: Timestamp(3_000),
        collaborator_id: None,
        expires_at: None,
    }
}

pub(crate) fn invitation(id: u64, endpoint_id: u64) -> InvitationRow {
    InvitationRow {
        id,
        endpoint_id,
        email: format!("{id}@x.test"),
        permissions: vec![Permission::Create],
        status: InvitationStatus::Pending,
        invited_by: 1,
        created_at: Timestamp(4_000),
        expires_at: Timestamp(5_000),
        token_sealed: vec![7],
        mail_id: 1,
        accepted_by: None,
        decided_at: None,
    }
}

pub(crate) fn audit(id: u64) -> AuditRow {
    AuditRow {
        id,
        time: Timestamp(6_000),
        actor_id: 1,
        actor_email: "a@x.test".into(),
        action: "endpoint.created".into(),
        details: serde_json::json!({ "n": id }),
    }
}

/// One write of a test, by name.
type Change = fn(&mut dyn WriteTx) -> Result<(), StoreError>;

pub(crate) fn access_counter(store: &dyn Store) -> u64 {
    store.read().unwrap().access_version().unwrap()
}

pub fn endpoints_are_found_by_id_slug_owner_and_collaborator(store: &dyn Store) {
    write(store, |tx| {
        tx.insert_endpoint(&endpoint(1, "one", 10))?;
        tx.insert_endpoint(&endpoint(2, "two", 20))?;
        tx.insert_endpoint(&endpoint(3, "three", 10))?;
        tx.insert_endpoint(&endpoint(4, "four", 20))?;
        tx.put_collaborator(&collaborator(4, 30))?;
        tx.put_collaborator(&collaborator(2, 30))?;
        // An owner who is a collaborator too is listed as the owner.
        tx.put_collaborator(&collaborator(3, 10))?;
        // The transaction reads its own writes.
        assert_eq!(tx.endpoint_id_by_slug("four")?, Some(4));
        assert_eq!(tx.endpoints_of(30)?.len(), 2);
        let mut renamed = endpoint(3, "three", 10);
        renamed.name = "Three".into();
        tx.put_endpoint(&renamed)
    })
    .unwrap();
    let read = store.read().unwrap();
    assert_eq!(read.endpoint(3).unwrap().unwrap().name, "Three");
    assert!(read.endpoint(5).unwrap().is_none());
    assert_eq!(read.endpoint_id_by_slug("two").unwrap(), Some(2));
    assert_eq!(read.endpoint_id_by_slug("five").unwrap(), None);
    let of = |account| -> Vec<(u64, Option<u64>)> {
        read.endpoints_of(account)
            .unwrap()
            .into_iter()
            .map(|(e, c)| (e.id, c.map(|c| c.account_id)))
            .collect()
    };
    assert_eq!(of(10), [(1, None), (3, None)]);
    assert_eq!(of(20), [(2, None), (4, None)]);
    assert_eq!(of(30), [(2, Some(30)), (4, Some(30))]);
    assert_eq!(of(40), []);
}

pub fn access_writes_report_access_changed_and_bump_the_counter(store: &dyn Store) {
    write(store, |tx| tx.insert_endpoint(&endpoint(1, "one", 10))).unwrap();
    let changes: [(&str, Change); 6] = [
        ("insert_endpoint", |tx| {
            tx.insert_endpoint(&endpoint(2, "two", 10))
        }),
        ("put_endpoint", |tx| {
            tx.put_endpoint(&endpoint(1, "one", 10))
        }),
        ("insert_api_key", |tx| {
            tx.insert_api_key(&[1; 32], &api_key(1, "k"))
        }),
        ("delete_api_key", |tx| tx.delete_api_key(&[1; 32])),
        ("put_collaborator", |tx| {
            tx.put_collaborator(&collaborator(1, 30))
        }),
        ("delete_collaborator", |tx| tx.delete_collaborator(1, 30)),
    ];
    for (name, change) in changes {
        let before = access_counter(store);
        let ((), effects) = write(store, change).unwrap();
        assert!(effects.access_changed, "{name}");
        assert_eq!(access_counter(store), before + 1, "{name}");
    }
    // Several in one transaction: one bump.
    let before = access_counter(store);
    let ((), effects) = write(store, |tx| {
        tx.put_endpoint(&endpoint(1, "one", 10))?;
        tx.put_collaborator(&collaborator(1, 30))?;
        tx.delete_collaborator(1, 30)
    })
    .unwrap();
    assert!(effects.access_changed);
    assert_eq!(access_counter(store), before + 1);
    let quiet: [(&str, Change); 3] = [
        ("insert_invitation", |tx| {
            tx.insert_invitation(&invitation(1, 1), &[9; 32])
        }),
        ("put_invitation", |tx| tx.put_invitation(&invitation(1, 1))),
        ("append_audit", |tx| tx.append_audit(1, &audit(1))),
    ];
    for (name, change) in quiet {
        let before = access_counter(store);
        let ((), effects) = write(store, change).unwrap();
        assert!(!effects.access_changed, "{name}");
        assert_eq!(access_counter(store), before, "{name}");
    }
}

pub fn api_keys_and_collaborators_are_stored_and_deleted(store: &dyn Store) {
    write(store, |tx| {
        tx.insert_api_key(&[1; 32], &api_key(1, "a"))?;
        tx.insert_api_key(&[2; 32], &api_key(1, "b"))?;
        tx.put_collaborator(&collaborator(1, 30))?;
        tx.put_collaborator(&collaborator(1, 10))?;
        tx.put_collaborator(&collaborator(1, 20))?;
        tx.put_collaborator(&collaborator(2, 10))?;
        let mut changed = collaborator(1, 20);
        changed.permissions = Permission::ALL.to_vec();
        tx.put_collaborator(&changed)
    })
    .unwrap();
    let read = store.read().unwrap();
    assert_eq!(read.api_key(&[2; 32]).unwrap().unwrap().key_id, "b");
    assert!(read.api_key(&[3; 32]).unwrap().is_none());
    let accounts: Vec<u64> = read
        .collaborators(1)
        .unwrap()
        .iter()
        .map(|c| c.account_id)
        .collect();
    assert_eq!(accounts, [10, 20, 30]);
    assert_eq!(
        read.collaborator(1, 20).unwrap().unwrap().permissions,
        Permission::ALL
    );
    assert!(read.collaborator(2, 20).unwrap().is_none());
    drop(read);

    write(store, |tx| {
        tx.delete_api_key(&[1; 32])?;
        tx.delete_collaborator(1, 20)?;
        assert!(tx.api_key(&[1; 32])?.is_none());
        assert!(tx.collaborator(1, 20)?.is_none());
        // Deleting what is not there is no change.
        tx.delete_api_key(&[1; 32])?;
        tx.delete_collaborator(9, 9)
    })
    .unwrap();
    let read = store.read().unwrap();
    assert!(read.api_key(&[1; 32]).unwrap().is_none());
    assert!(read.api_key(&[2; 32]).unwrap().is_some());
    assert_eq!(read.collaborators(1).unwrap().len(), 2);
}

pub fn invitations_are_found_by_id_token_and_endpoint_newest_first(store: &dyn Store) {
    write(store, |tx| {
        for (id, endpoint_id) in [(1, 1), (2, 2), (3, 1), (4, 1)] {
            tx.insert_invitation(&invitation(id, endpoint_id), &[id as u8; 32])?;
        }
        let mut accepted = invitation(3, 1);
        accepted.status = InvitationStatus::Accepted;
        tx.put_invitation(&accepted)?;
        assert_eq!(
            tx.invitation(3)?.unwrap().status,
            InvitationStatus::Accepted
        );
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let read = store.read().unwrap();
    assert_eq!(read.invitation(2).unwrap().unwrap().endpoint_id, 2);
    assert!(read.invitation(5).unwrap().is_none());
    let by_token = read.invitation_by_token(&[3; 32]).unwrap().unwrap();
    assert_eq!(
        (by_token.id, by_token.status),
        (3, InvitationStatus::Accepted)
    );
    assert!(read.invitation_by_token(&[5; 32]).unwrap().is_none());
    let ids: Vec<u64> = read.invitations(1).unwrap().iter().map(|i| i.id).collect();
    assert_eq!(ids, [4, 3, 1]);
    assert!(read.invitations(3).unwrap().is_empty());
    drop(read);
    // An invitation that was never inserted has no token to keep: refused.
    assert!(write(store, |tx| tx.put_invitation(&invitation(9, 1))).is_err());
    assert!(store.read().unwrap().invitation(9).unwrap().is_none());
}

pub fn audit_pages_go_newest_first_below_before(store: &dyn Store) {
    write(store, |tx| {
        for endpoint_id in [1, 2, 1, 1, 2, 1, 1] {
            let id = tx.next_id(IdKind::Audit)?;
            tx.append_audit(endpoint_id, &audit(id))?;
        }
        assert_eq!(tx.audit_page(2, u64::MAX, 10)?.len(), 2);
        Ok::<_, StoreError>(())
    })
    .unwrap();
    let read = store.read().unwrap();
    let page = |endpoint_id, before, limit| -> Vec<u64> {
        read.audit_page(endpoint_id, before, limit)
            .unwrap()
            .iter()
            .map(|a| a.id)
            .collect()
    };
    assert_eq!(page(1, u64::MAX, 10), [7, 6, 4, 3, 1]);
    assert_eq!(page(1, u64::MAX, 2), [7, 6]);
    assert_eq!(page(1, 6, 2), [4, 3]);
    assert_eq!(page(1, 3, 10), [1]);
    assert_eq!(page(1, 1, 10), Vec::<u64>::new());
    assert_eq!(page(1, u64::MAX, 0), Vec::<u64>::new());
    assert_eq!(page(2, u64::MAX, 10), [5, 2]);
    assert_eq!(page(1, 7, 1)[0], 6);
    assert_eq!(
        read.audit_page(1, 2, 1).unwrap()[0].details,
        serde_json::json!({ "n": 1 })
    );
}

pub fn concurrent_access_changes_all_bump_the_counter(store: &dyn Store) {
    write(store, |tx| tx.insert_endpoint(&endpoint(1, "one", 10))).unwrap();
    let before = access_counter(store);
    let barrier = Barrier::new(2);
    const EACH: u64 = 20;
    std::thread::scope(|scope| {
        for worker in 0..2u64 {
            let (store, barrier) = (store, &barrier);
            scope.spawn(move || {
                barrier.wait();
                for n in 0..EACH {
                    let hash = [(worker * EACH + n) as u8; 32];
                    let ((), effects) =
                        write(store, |tx| tx.insert_api_key(&hash, &api_key(1, "k"))).unwrap();
                    assert!(effects.access_changed);
                }
            });
        }
    });
    assert_eq!(access_counter(store), before + 2 * EACH);
}
