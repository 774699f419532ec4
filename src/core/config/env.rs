//! The `INTAKE_*` environment variables: each names a config key and overrides the file's
//! value of it (`Config::load_with_env` applies them).

use std::ffi::OsString;

use serde::Deserialize;

use super::{Config, ConfigError};

/// Variables the command line reads itself (`intake endpoint`, `intake export`): not config
/// keys.
pub const CLI_VARIABLES: [&str; 3] = ["INTAKE_SERVER", "INTAKE_TOKEN", "INTAKE_API_KEY"];

/// The config keys set through the environment: `INTAKE_` + the key in upper case, with `__`
/// between a section and its key (`INTAKE_LISTEN`, `INTAKE_SMTP__HOST`,
/// `INTAKE_BACKUP__KEEP`, `INTAKE_STORAGE__POSTGRES__URL`). Returns `(variable, key path, value)`; a variable that names no
/// config key is refused, so a typo never goes unnoticed.
pub(super) fn overrides(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Vec<(String, Vec<String>, toml::Value)>, ConfigError> {
    let mut overrides = Vec::new();
    for (name, value) in vars {
        let Some(name) = name.to_str().filter(|n| n.starts_with("INTAKE_")) else {
            continue;
        };
        if CLI_VARIABLES.contains(&name) {
            continue;
        }
        let env_err = |message: String| ConfigError::Env {
            variable: name.to_string(),
            message,
        };
        let value = value
            .into_string()
            .map_err(|_| env_err("the value is not UTF-8".into()))?;
        let key: Vec<String> = name["INTAKE_".len()..]
            .split("__")
            .map(str::to_ascii_lowercase)
            .collect();
        if key.iter().any(|k| k.is_empty()) {
            return Err(env_err(
                "names no config key (write INTAKE_KEY or INTAKE_SECTION__KEY)".into(),
            ));
        }
        let value = env_value(&value);
        // Deserialising the key alone tells whether it exists: `deny_unknown_fields` names it.
        let mut probe = toml::Table::new();
        set_key(&mut probe, &key, value.clone()).map_err(env_err)?;
        if let Err(err) = Config::deserialize(toml::Value::Table(probe))
            && err.to_string().contains("unknown field")
        {
            return Err(env_err(format!("names no config key ({})", key.join("."))));
        }
        overrides.push((name.to_string(), key, value));
    }
    Ok(overrides)
}

/// Sets the key a variable names in the file's `table`.
pub(super) fn apply(
    table: &mut toml::Table,
    variable: &str,
    key: &[String],
    value: toml::Value,
) -> Result<(), ConfigError> {
    set_key(table, key, value).map_err(|message| ConfigError::Env {
        variable: variable.to_string(),
        message,
    })
}

/// Sets `key` (a key, or sections down to a key) in `table`, creating the sections when
/// needed.
fn set_key(table: &mut toml::Table, key: &[String], value: toml::Value) -> Result<(), String> {
    match key {
        [name] => {
            table.insert(name.clone(), value);
            Ok(())
        }
        [section, rest @ ..] if !rest.is_empty() => {
            let entry = table
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match entry {
                toml::Value::Table(section) => set_key(section, rest, value),
                _ => Err(format!("{section} is not a section of the config")),
            }
        }
        _ => Err("names no config key".into()),
    }
}

/// An environment value read as TOML when it is a number, a boolean, an array or a quoted
/// string, and as a plain string otherwise: `INTAKE_LISTEN=0.0.0.0:8080` needs no quotes,
/// while a string that looks like a number (a numeric password) is written quoted, `"1234"`.
fn env_value(text: &str) -> toml::Value {
    let parsed = toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .filter(|table| table.len() == 1)
        .and_then(|mut table| table.remove("v"));
    match parsed {
        Some(
            value @ (toml::Value::Integer(_)
            | toml::Value::Float(_)
            | toml::Value::Boolean(_)
            | toml::Value::Array(_)
            | toml::Value::String(_)),
        ) => value,
        _ => toml::Value::String(text.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Duration;

    use crate::core::config::{PostgresTls, StorageBackend};

    fn with_env(text: &str, vars: &[(&str, &str)]) -> Result<Config, String> {
        let dir = std::env::temp_dir().join(format!("intake-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.toml", crate::core::ids::random_base32(8)));
        std::fs::write(&path, text).unwrap();
        let vars = vars
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let result = Config::load_with_env(Some(&path), vars).map_err(|e| e.to_string());
        let _ = std::fs::remove_file(&path);
        result
    }

    #[test]
    fn environment_variables_override_the_file() {
        let c = with_env(
            "listen = \"127.0.0.1:1\"\n[storage]\ncache_mb = 8\n",
            &[
                ("INTAKE_LISTEN", "0.0.0.0:9000"),
                ("INTAKE_STORAGE__CACHE_MB", "32"),
                ("INTAKE_POLL__HOLD_BACK", "5s"),
                ("INTAKE_OPERATIONS__METRICS_TOKEN", "\"0042\""),
                ("INTAKE_BACKUP__DIR", "/var/backups/intake"),
                ("INTAKE_TOKEN", "not a config key"),
                ("INTAKE_API_KEY", "not a config key either"),
                ("HOME", "/root"),
            ],
        )
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.storage.cache_mb, 32);
        assert_eq!(c.poll.hold_back, Duration::from_secs(5));
        assert_eq!(c.operations.metrics_token.unwrap().expose(), "0042");
        assert_eq!(
            c.backup.dir.as_deref(),
            Some(Path::new("/var/backups/intake"))
        );
        let err = with_env("", &[("INTAKE_STORAGE__CACHEMB", "1")]).unwrap_err();
        assert!(err.contains("INTAKE_STORAGE__CACHEMB"), "{err}");
        let err = with_env("", &[("INTAKE_A__B__C", "1")]).unwrap_err();
        assert!(err.contains("INTAKE_A__B__C"), "{err}");
        let err = with_env("", &[("INTAKE_LISTEN__PORT", "1")]).unwrap_err();
        assert!(err.contains("listen"), "{err}");
    }

    #[test]
    fn environment_variables_reach_the_keys_of_subsections() {
        let c = with_env(
            "[storage]
min_free_mb = 4
[storage.postgres]
pool_size = 3
",
            &[
                ("INTAKE_STORAGE__BACKEND", "postgres"),
                ("INTAKE_STORAGE__POSTGRES__URL", "postgresql://db/intake"),
                ("INTAKE_STORAGE__POSTGRES__TLS", "disable"),
            ],
        )
        .unwrap();
        assert_eq!(c.storage.backend, StorageBackend::Postgres);
        assert_eq!(c.storage.min_free_mb, 4);
        let postgres = c.storage.postgres.unwrap();
        assert_eq!(postgres.url.expose(), "postgresql://db/intake");
        assert_eq!(postgres.tls, PostgresTls::Disable);
        assert_eq!(postgres.pool_size, 3);
        // Without a file's section, the variable makes it.
        let c = with_env("", &[("INTAKE_STORAGE__POSTGRES__URL", "host=db")]).unwrap();
        assert_eq!(c.storage.postgres.unwrap().url.expose(), "host=db");
        let err = with_env("", &[("INTAKE_STORAGE__POSTGRES__URI", "x")]).unwrap_err();
        assert!(err.contains("INTAKE_STORAGE__POSTGRES__URI"), "{err}");
        // A key is no section: its value is refused, naming it.
        let err = with_env("", &[("INTAKE_STORAGE__POSTGRES__URL__X", "1")]).unwrap_err();
        assert!(err.contains("url"), "{err}");
        let err = with_env("", &[("INTAKE_STORAGE__CACHE_MB__X", "1")]).unwrap_err();
        assert!(err.contains("cache_mb"), "{err}");
    }

    #[test]
    fn environment_values_are_toml_or_plain_strings() {
        assert_eq!(env_value("12"), toml::Value::Integer(12));
        assert_eq!(env_value("true"), toml::Value::Boolean(true));
        assert_eq!(env_value("\"12\""), toml::Value::String("12".into()));
        assert_eq!(
            env_value("0.0.0.0:80"),
            toml::Value::String("0.0.0.0:80".into())
        );
        assert_eq!(
            env_value("1\nlisten = 2"),
            toml::Value::String("1\nlisten = 2".into())
        );
        assert_eq!(
            env_value("1979-05-27"),
            toml::Value::String("1979-05-27".into())
        );
    }
}
