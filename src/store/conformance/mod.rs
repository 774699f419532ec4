//! The store's contract, checked the same way on every backend: each public function of the
//! modules below states rules of the seam's traits against a fresh store, and
//! [`conformance_tests!`] runs them all as tests of a backend (`store::redb` and
//! `store::postgres` each invoke it once). A rule every backend must keep goes here, not into
//! one backend's own tests, which keep only what is that backend's own (its SQL, its files,
//! several nodes at once). A new check is listed in the macro too: one left out is dead
//! code, which clippy (`-D warnings`) refuses.

pub mod accounts;
pub mod endpoints;
pub mod erasures;
pub mod mail;
pub mod purge;
pub mod records;
pub mod subscriptions;
pub mod usage;
pub mod webhooks;

/// Every check of the modules above as a `#[test]` of the backend that `$make` opens (an
/// expression giving a fresh store, or something that dereferences to one).
macro_rules! conformance_tests {
    ($make:expr) => {
        #[test]
        fn accounts_accounts_are_found_by_id_and_email_and_paged_oldest_first() {
            let store = $make;
            $crate::store::conformance::accounts::accounts_are_found_by_id_and_email_and_paged_oldest_first(&*store);
        }
        #[test]
        fn accounts_account_writes_report_access_changed_and_bump_the_counter_once_per_commit() {
            let store = $make;
            $crate::store::conformance::accounts::account_writes_report_access_changed_and_bump_the_counter_once_per_commit(&*store);
        }
        #[test]
        fn accounts_tokens_are_found_by_hash_and_by_account() {
            let store = $make;
            $crate::store::conformance::accounts::tokens_are_found_by_hash_and_by_account(&*store);
        }
        #[test]
        fn accounts_sessions_are_listed_by_account() {
            let store = $make;
            $crate::store::conformance::accounts::sessions_are_listed_by_account(&*store);
        }
        #[test]
        fn accounts_password_resets_are_found_by_hash_and_deleted_by_account() {
            let store = $make;
            $crate::store::conformance::accounts::password_resets_are_found_by_hash_and_deleted_by_account(&*store);
        }
        #[test]
        fn accounts_sessions_end_one_by_one_by_account_and_by_expiry() {
            let store = $make;
            $crate::store::conformance::accounts::sessions_end_one_by_one_by_account_and_by_expiry(&*store);
        }
        #[test]
        fn accounts_notifications_are_listed_newest_first_per_account() {
            let store = $make;
            $crate::store::conformance::accounts::notifications_are_listed_newest_first_per_account(&*store);
        }
        #[test]
        fn accounts_concurrent_sign_ups_under_one_email_make_one_account() {
            let store = $make;
            $crate::store::conformance::accounts::concurrent_sign_ups_under_one_email_make_one_account(&*store);
        }
        #[test]
        fn endpoints_endpoints_are_found_by_id_slug_owner_and_collaborator() {
            let store = $make;
            $crate::store::conformance::endpoints::endpoints_are_found_by_id_slug_owner_and_collaborator(&*store);
        }
        #[test]
        fn endpoints_access_writes_report_access_changed_and_bump_the_counter() {
            let store = $make;
            $crate::store::conformance::endpoints::access_writes_report_access_changed_and_bump_the_counter(&*store);
        }
        #[test]
        fn endpoints_api_keys_and_collaborators_are_stored_and_deleted() {
            let store = $make;
            $crate::store::conformance::endpoints::api_keys_and_collaborators_are_stored_and_deleted(&*store);
        }
        #[test]
        fn endpoints_invitations_are_found_by_id_token_and_endpoint_newest_first() {
            let store = $make;
            $crate::store::conformance::endpoints::invitations_are_found_by_id_token_and_endpoint_newest_first(&*store);
        }
        #[test]
        fn endpoints_audit_pages_go_newest_first_below_before() {
            let store = $make;
            $crate::store::conformance::endpoints::audit_pages_go_newest_first_below_before(&*store);
        }
        #[test]
        fn endpoints_concurrent_access_changes_all_bump_the_counter() {
            let store = $make;
            $crate::store::conformance::endpoints::concurrent_access_changes_all_bump_the_counter(&*store);
        }
        #[test]
        fn subscriptions_subscription_health_is_noted_alone_and_kept_with_its_settings() {
            let store = $make;
            $crate::store::conformance::subscriptions::subscription_health_is_noted_alone_and_kept_with_its_settings(&*store);
        }
        #[test]
        fn mail_mail_pages_go_newest_first_and_the_queue_oldest_first() {
            let store = $make;
            $crate::store::conformance::mail::mail_pages_go_newest_first_and_the_queue_oldest_first(&*store);
        }
        #[test]
        fn mail_purges_remove_finished_mail_created_before_the_cutoff_in_chunks() {
            let store = $make;
            $crate::store::conformance::mail::purges_remove_finished_mail_created_before_the_cutoff_in_chunks(&*store);
        }
        #[test]
        fn purge_purge_deliveries_before_takes_the_finished_ones_made_before_the_cutoff() {
            let store = $make;
            $crate::store::conformance::purge::purge_deliveries_before_takes_the_finished_ones_made_before_the_cutoff(&*store);
        }
        #[test]
        fn records_a_batch_applies_its_writes_in_order_seeing_its_own() {
            let store = $make;
            $crate::store::conformance::records::a_batch_applies_its_writes_in_order_seeing_its_own(&*store);
        }
        #[test]
        fn records_an_expired_claim_is_forgotten_and_replaced() {
            let store = $make;
            $crate::store::conformance::records::an_expired_claim_is_forgotten_and_replaced(&*store);
        }
        #[test]
        fn records_applied_writes_get_their_deliveries_in_the_commit() {
            let store = $make;
            $crate::store::conformance::records::applied_writes_get_their_deliveries_in_the_commit(&*store);
        }
        #[test]
        fn records_a_create_of_many_records_stores_them_all_under_one_claim() {
            let store = $make;
            $crate::store::conformance::records::a_create_of_many_records_stores_them_all_under_one_claim(&*store);
        }
        #[test]
        fn records_record_page_keeps_its_bounds_order_and_more() {
            let store = $make;
            $crate::store::conformance::records::record_page_keeps_its_bounds_order_and_more(&*store);
        }
        #[test]
        fn records_record_partitions_are_listed_once_in_order() {
            let store = $make;
            $crate::store::conformance::records::record_partitions_are_listed_once_in_order(&*store);
        }
        #[test]
        fn records_visit_newest_first_reads_in_chunks_until_the_visitor_stops() {
            let store = $make;
            $crate::store::conformance::records::visit_newest_first_reads_in_chunks_until_the_visitor_stops(&*store);
        }
        #[test]
        fn records_visit_records_follows_the_given_order_until_the_visitor_stops() {
            let store = $make;
            $crate::store::conformance::records::visit_records_follows_the_given_order_until_the_visitor_stops(&*store);
        }
        #[test]
        fn erasures_an_erasure_step_removes_its_records_and_their_delivery_bodies() {
            let store = $make;
            $crate::store::conformance::erasures::an_erasure_step_removes_its_records_and_their_delivery_bodies(&*store);
        }
        #[test]
        fn records_purge_partition_before_takes_the_oldest_first_within_its_bounds() {
            let store = $make;
            $crate::store::conformance::records::purge_partition_before_takes_the_oldest_first_within_its_bounds(&*store);
        }
        #[test]
        fn webhooks_secrets_and_webhook_settings_are_put_replaced_and_deleted() {
            let store = $make;
            $crate::store::conformance::webhooks::secrets_and_webhook_settings_are_put_replaced_and_deleted(&*store);
        }
        #[test]
        fn webhooks_deliveries_are_read_by_id_and_paged_newest_first() {
            let store = $make;
            $crate::store::conformance::webhooks::deliveries_are_read_by_id_and_paged_newest_first(&*store);
        }
        #[test]
        fn webhooks_the_due_list_is_in_order_up_to_now_and_wraps_around() {
            let store = $make;
            $crate::store::conformance::webhooks::the_due_list_is_in_order_up_to_now_and_wraps_around(&*store);
        }
        #[test]
        fn webhooks_record_outcomes_follows_the_skip_rules() {
            let store = $make;
            $crate::store::conformance::webhooks::record_outcomes_follows_the_skip_rules(&*store);
        }
        #[test]
        fn webhooks_a_retry_asked_for_during_the_attempt_is_due_when_it_ends() {
            let store = $make;
            $crate::store::conformance::webhooks::a_retry_asked_for_during_the_attempt_is_due_when_it_ends(&*store);
        }
        #[test]
        fn webhooks_cancelled_deliveries_leave_the_due_list_and_an_attempt_in_flight_ends() {
            let store = $make;
            $crate::store::conformance::webhooks::cancelled_deliveries_leave_the_due_list_and_an_attempt_in_flight_ends(&*store);
        }
        #[test]
        fn webhooks_a_delivery_made_outside_the_batch_takes_a_new_id_and_keeps_its_attempt() {
            let store = $make;
            $crate::store::conformance::webhooks::a_delivery_made_outside_the_batch_takes_a_new_id_and_keeps_its_attempt(&*store);
        }
        #[test]
        fn webhooks_failure_mails_are_noted_once_per_endpoint_and_day() {
            let store = $make;
            $crate::store::conformance::webhooks::failure_mails_are_noted_once_per_endpoint_and_day(&*store);
        }
        #[test]
        fn webhooks_move_due_lists_a_delivery_once() {
            let store = $make;
            $crate::store::conformance::webhooks::move_due_lists_a_delivery_once(&*store);
        }
        #[test]
        fn usage_flushes_add_to_the_month_and_day_counters() {
            let store = $make;
            $crate::store::conformance::usage::flushes_add_to_the_month_and_day_counters(&*store);
        }
        #[test]
        fn usage_concurrent_flushes_from_several_nodes_all_count() {
            let store = $make;
            $crate::store::conformance::usage::concurrent_flushes_from_several_nodes_all_count(&*store);
        }
    };
}
pub(crate) use conformance_tests;
