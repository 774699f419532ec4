//! The integration tests: one test binary, one module per file beside this one.
//!
//! One binary rather than Cargo's default of one per file: each binary links the whole server
//! and its dependencies (about 330 MB with debug info), so 35 of them filled the CI machine's
//! disk and spent minutes linking. Cargo does not discover test files on its own here
//! (`autotests = false`): a new file is added below, and `architecture::every_test_file_is_a_module`
//! checks that none is left out. Run one file with `cargo test --test integration poll::`.

mod common;

mod account_self_service;
mod accounts;
mod architecture;
mod backup;
mod batch;
mod cli;
mod cluster;
mod dashboard;
mod dashboard_account;
mod dashboard_browser;
mod dashboard_deploy;
mod dashboard_keys;
mod dashboard_layout;
mod dashboard_logs;
mod dashboard_product;
mod dashboard_records;
mod dashboard_webhooks;
mod data_api;
mod deployment;
mod durability;
mod endpoint_deletion;
mod erasure;
mod export;
mod export_cli;
mod failover;
mod faults;
mod key_rotation;
mod logs_api;
mod mail;
mod management;
mod openapi;
mod operations;
mod partition;
mod payload_fidelity;
mod permissions;
mod poll;
mod retention;
mod reverse_proxy;
mod schemas;
mod search;
mod security;
mod stream;
mod stream_access;
mod telemetry;
mod tls;
mod upgrade;
mod webhook_cancel;
mod webhook_egress;
mod webhook_secrets;
mod webhook_settings;
mod webhook_subscriptions;
mod webhooks;
mod workflows;
