//! The schema's migrations, embedded in the binary and applied at start, and the checks of the
//! server's settings.
//!
//! Migrations are numbered SQL files (`migrations/NNNN_*.sql`), each applied once in its own
//! transaction and recorded in `intake_schema`. Every node runs [`prepare`] when it starts;
//! a session advisory lock makes one migrate while the others wait, and then find nothing
//! left to do. A database migrated by a newer binary is refused: this one would not know
//! what the newer schema means.

use super::Pool;
use crate::store::StoreError;

/// The migrations in order: (version, SQL).
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("migrations/0001_initial.sql")),
    (2, include_str!("migrations/0002_subscription_pace.sql")),
    (3, include_str!("migrations/0003_record_events.sql")),
    (4, include_str!("migrations/0004_job_holder.sql")),
    (5, include_str!("migrations/0005_subscription_health.sql")),
    (6, include_str!("migrations/0006_erasures.sql")),
    (7, include_str!("migrations/0007_password_resets.sql")),
];

/// The advisory lock key the migrating node holds (`intake` in ASCII).
const MIGRATION_LOCK: i64 = 0x0000_696e_7461_6b65;

/// The settings a node refuses to run with, and what each must be: with any of them off, an
/// acknowledged write could be lost in a crash of the database server.
const REQUIRED_SETTINGS: &[(&str, &[&str])] = &[
    ("fsync", &["on"]),
    ("full_page_writes", &["on"]),
    (
        "synchronous_commit",
        &["on", "local", "remote_write", "remote_apply"],
    ),
];

/// The oldest PostgreSQL this schema works on (`pg_trgm` is a trusted extension from 13 on).
const MIN_SERVER_VERSION: i32 = 130_000;

/// The schema version this binary writes.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |(version, _)| *version)
}

fn refused(message: String) -> StoreError {
    StoreError::Database(message)
}

/// Checks the server and its settings, then brings the schema up to this binary's version.
pub async fn prepare(pool: &Pool) -> Result<(), StoreError> {
    let mut client = pool.get().await?;
    check_server(&client).await?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let migrated = migrate(&mut client).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    migrated?;
    unlocked?;
    Ok(())
}

async fn check_server(client: &tokio_postgres::Client) -> Result<(), StoreError> {
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await?
        .try_get(0)?;
    if version < MIN_SERVER_VERSION {
        return Err(refused(format!(
            "PostgreSQL {version} is too old: intake needs 13 or newer"
        )));
    }
    let mut wrong = Vec::new();
    for (name, allowed) in REQUIRED_SETTINGS {
        let value: String = client
            .query_one("SELECT current_setting($1)", &[name])
            .await?
            .try_get(0)?;
        if !allowed.contains(&value.as_str()) {
            wrong.push(format!(
                "{name} = {value} (must be {})",
                allowed.join(" or ")
            ));
        }
    }
    if !wrong.is_empty() {
        return Err(refused(format!(
            "the database's settings would lose acknowledged writes in a crash: {}; change \
             them in postgresql.conf (or for intake's role or database) and start again",
            wrong.join(", ")
        )));
    }
    Ok(())
}

async fn migrate(client: &mut tokio_postgres::Client) -> Result<(), StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS intake_schema (
                 version integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await?;
    let current: i32 = client
        .query_one("SELECT coalesce(max(version), 0) FROM intake_schema", &[])
        .await?
        .try_get(0)?;
    let latest = latest_version();
    if current > latest {
        return Err(refused(format!(
            "the database holds schema version {current}, written by a newer intake; this \
             intake ({}) knows schema versions up to {latest} and changed nothing. Run the \
             newer intake on this node too (every node of a database runs one version), or, \
             to go back to this version, restore the database from the dump taken before the \
             upgrade (docs/src/upgrading.md)",
            env!("CARGO_PKG_VERSION")
        )));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        let tx = client.transaction().await?;
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO intake_schema (version) VALUES ($1)",
            &[version],
        )
        .await?;
        tx.commit().await?;
        log::info!("database schema migrated to version {version}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{PgStore, test_cluster};
    use super::latest_version;
    use crate::core::config::{PostgresConfig, PostgresTls, Secret};

    fn config(url: &str) -> PostgresConfig {
        PostgresConfig {
            url: Secret::new(url),
            tls: PostgresTls::Disable,
            ..PostgresConfig::default()
        }
    }

    fn database() -> (String, String) {
        let url = test_cluster::shared().database();
        let name = url.rsplit('/').next().unwrap_or_default().to_string();
        (url, name)
    }

    #[test]
    fn nodes_starting_together_migrate_once() {
        let (url, name) = database();
        let opened: Vec<_> = (0..4)
            .map(|_| {
                let config = config(&url);
                std::thread::spawn(move || PgStore::open(&config).map(drop))
            })
            .collect();
        for node in opened {
            node.join().unwrap().unwrap();
        }
        let versions = test_cluster::shared().psql(&name, "SELECT count(*) FROM intake_schema");
        assert_eq!(versions, latest_version().to_string());
    }

    #[test]
    fn a_database_of_a_newer_intake_is_refused() {
        let (url, name) = database();
        PgStore::open(&config(&url)).unwrap();
        test_cluster::shared().psql(&name, "INSERT INTO intake_schema (version) VALUES (999)");
        let err = PgStore::open(&config(&url)).err().unwrap().to_string();
        assert!(err.contains("schema version 999"), "{err}");
        assert!(
            err.contains(&format!("knows schema versions up to {}", latest_version())),
            "{err}"
        );
        assert!(err.contains("Run the newer intake on this node"), "{err}");
    }

    #[test]
    fn settings_that_could_lose_acknowledged_writes_are_refused_by_name() {
        let (url, name) = database();
        test_cluster::shared().psql(
            "postgres",
            &format!("ALTER DATABASE {name} SET synchronous_commit = off"),
        );
        let err = PgStore::open(&config(&url)).err().unwrap().to_string();
        assert!(err.contains("synchronous_commit = off"), "{err}");
        // Nothing was created in a database refused.
        let tables = test_cluster::shared().psql(
            &name,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'intake_schema'",
        );
        assert_eq!(tables, "0");
    }
}
