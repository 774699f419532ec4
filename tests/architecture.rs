//! Holds the code to the dependency rules of ARCHITECTURE.md ("Dependency rules"): every rule
//! line there is checked against the `crate::` paths and external crate names in `src/`.
//!
//! Two forms of rule line are understood:
//! - ``- `src/domain/` never imports `crate::workers`, `crate::http`.``: no file under the
//!   folder (or the single file) uses any of those paths, in a `use` line, a grouped
//!   `use crate::{...}` or inline;
//! - ``- Only `src/store/redb/` names `redb`.``: no file outside the folder uses the external
//!   crate `redb` (`redb::...` not preceded by another path segment).

use std::path::{Path, PathBuf};

const ARCHITECTURE: &str = include_str!("../ARCHITECTURE.md");

#[derive(Debug)]
enum Rule {
    NeverImports { place: String, paths: Vec<String> },
    OnlyNames { place: String, krate: String },
}

/// The text between each pair of backticks of `line`.
fn quoted(line: &str) -> Vec<String> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn rules() -> Vec<Rule> {
    let section = ARCHITECTURE
        .split("\n## ")
        .find(|s| s.starts_with("Dependency rules"))
        .expect("ARCHITECTURE.md has a \"Dependency rules\" section");
    let mut rules = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("- ")) {
        let names = quoted(line);
        if line.contains(" never imports ") {
            let (place, paths) = names.split_first().expect("a rule names its place");
            rules.push(Rule::NeverImports {
                place: place.clone(),
                paths: paths.to_vec(),
            });
        } else if line.starts_with("- Only ") && line.contains(" names ") {
            assert_eq!(
                names.len(),
                2,
                "`Only `X` names `crate`.` takes two names: {line}"
            );
            rules.push(Rule::OnlyNames {
                place: names[0].clone(),
                krate: names[1].clone(),
            });
        }
    }
    assert!(rules.len() >= 8, "too few rules were read: {rules:?}");
    rules
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its `//` comments (doc comments included).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::...` path the code names, grouped imports expanded at every level
/// (`use crate::{a, b::{c, d as e}}` gives `crate::a`, `crate::b::c` and `crate::b::d`; a
/// group's `self` names the module itself).
fn crate_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
            continue; // `$crate::`, `intake_crate::`...
        }
        let end = use_tree_end(rest);
        expand("crate::", &rest[..end], &mut paths);
    }
    paths
}

/// Where the use tree at the start of `text` ends: a path, and its balanced `{...}` group.
fn use_tree_end(text: &str) -> usize {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return at + 1;
                }
            }
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => return at,
            _ => {}
        }
    }
    text.len()
}

/// Adds `prefix` joined with every path of the use tree `tree` to `out`.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(group) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        let mut depth = 0usize;
        let mut start = 0;
        for (at, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    expand(prefix, &group[start..at], out);
                    start = at + 1;
                }
                _ => {}
            }
        }
        expand(prefix, &group[start..], out);
    } else if let Some(at) = tree.find("::{") {
        expand(&format!("{prefix}{}::", &tree[..at]), &tree[at + 2..], out);
    } else {
        let leaf = tree.split(" as ").next().unwrap_or_default().trim();
        match leaf {
            "" => {}
            "self" => out.push(prefix.trim_end_matches("::").to_string()),
            _ => out.push(format!("{prefix}{leaf}")),
        }
    }
}

/// Whether `path` is `module` or inside it.
fn within(path: &str, module: &str) -> bool {
    path == module || path.starts_with(&format!("{module}::"))
}

/// Whether the code names the external crate `krate` (`krate::` not after another segment).
fn names_crate(code: &str, krate: &str) -> bool {
    let needle = format!("{krate}::");
    code.match_indices(&needle).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    })
}

#[test]
fn the_code_keeps_the_dependency_rules_of_architecture_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut broken = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(root)
            .expect("under the crate")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(file).expect("read a source file");
        let code = code(&text);
        let paths = crate_paths(&code);
        for rule in rules() {
            match &rule {
                Rule::NeverImports {
                    place,
                    paths: forbidden,
                } if relative.starts_with(place) => {
                    for path in &paths {
                        if let Some(module) = forbidden.iter().find(|m| within(path, m)) {
                            broken.push(format!(
                                "{relative} imports {path} (`{place}` never imports `{module}`)"
                            ));
                        }
                    }
                }
                Rule::OnlyNames { place, krate }
                    if !relative.starts_with(place) && names_crate(&code, krate) =>
                {
                    broken.push(format!("{relative} names `{krate}` (only `{place}` may)"));
                }
                _ => {}
            }
        }
    }
    assert!(
        broken.is_empty(),
        "dependency rules broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_checker_sees_imports_in_every_form() {
    let code = code(
        "use crate::store::Store;\nuse crate::{http, workers::ingest_writer};\n\
         fn f() { crate::server::start(); } // crate::cli::run\n$crate::x",
    );
    assert_eq!(
        crate_paths(&code),
        [
            "crate::store::Store",
            "crate::http",
            "crate::workers::ingest_writer",
            "crate::server::start"
        ]
    );
    assert!(within("crate::http::api::x", "crate::http::api"));
    assert!(!within("crate::http::apis", "crate::http::api"));
    assert!(names_crate("use redb::ReadableTable;", "redb"));
    assert!(names_crate("x: redb::Error", "redb"));
    assert!(!names_crate("use crate::store::redb::RedbStore;", "redb"));
}

/// The longest a file of `src/` may be, unless ARCHITECTURE.md's "File size" lists it.
const MAX_LINES: usize = 800;

/// The files of ARCHITECTURE.md's "File size" list.
fn long_files_allowed() -> Vec<String> {
    let section = ARCHITECTURE
        .split("\n## ")
        .find(|s| s.starts_with("File size"))
        .expect("ARCHITECTURE.md has a \"File size\" section");
    section
        .lines()
        .filter(|l| l.starts_with("- `"))
        .filter_map(|l| quoted(l).into_iter().next())
        .collect()
}

/// No file of `src/` is over `MAX_LINES` lines but those listed, and every listed one is.
#[test]
fn no_source_file_is_longer_than_the_rule_allows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let allowed = long_files_allowed();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut long = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(root)
            .expect("under the crate")
            .to_string_lossy()
            .into_owned();
        let lines = std::fs::read_to_string(file)
            .expect("read a source file")
            .lines()
            .count();
        if lines > MAX_LINES {
            long.push(relative.clone());
            if !allowed.contains(&relative) {
                panic!("{relative} has {lines} lines (at most {MAX_LINES}: split it)");
            }
        }
    }
    for listed in &allowed {
        assert!(
            long.contains(listed),
            "{listed} is listed in ARCHITECTURE.md's \"File size\" but is not over {MAX_LINES} lines"
        );
    }
}

#[test]
fn the_checker_expands_nested_groups() {
    assert_eq!(
        crate_paths(&code(
            "use crate::store::{Row, WriteTx as Tx};\n\
             use crate::domain::{handles::Handles, webhooks::{self, policy::{Verdict}}};"
        )),
        [
            "crate::store::Row",
            "crate::store::WriteTx",
            "crate::domain::handles::Handles",
            "crate::domain::webhooks",
            "crate::domain::webhooks::policy::Verdict"
        ]
    );
}

/// The integration tests are one binary (`tests/main.rs`, with `autotests = false`), so Cargo
/// does not notice a new file in `tests/`: this holds `main.rs` to naming every one of them.
#[test]
fn every_test_file_is_a_module() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = std::fs::read_to_string(tests.join("main.rs")).expect("tests/main.rs");
    let declared: Vec<&str> = main
        .lines()
        .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&tests).expect("tests/") {
        let path = entry.expect("tests/ entry").path();
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let is_module = path.is_dir() && path.join("mod.rs").is_file();
        let is_file = path.extension().is_some_and(|e| e == "rs") && stem != "main";
        if (is_module || is_file) && !declared.contains(&stem) {
            missing.push(stem.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "tests/main.rs does not declare: {missing:?}"
    );
}
