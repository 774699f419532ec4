//! Build metadata for `intake --version`: the git commit and how the binary was built.
//!
//! The variables this script gives rustc are named `BUILD_INTAKE_*`, outside the runtime
//! `INTAKE_*` namespace: cargo also sets them in the environment of every program it runs
//! (`cargo run`, `cargo test`), where the config loader refuses unknown `INTAKE_*` names.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=BUILD_INTAKE_COMMIT");
    println!(
        "cargo:rustc-env=BUILD_INTAKE_COMMIT={}",
        git_commit().unwrap_or_else(|| "unknown".into())
    );
    // Static or dynamic C runtime, target and profile: what an operator needs to know when a
    // binary misbehaves on some machine.
    let static_crt = std::env::var("CARGO_CFG_TARGET_FEATURE")
        .unwrap_or_default()
        .split(',')
        .any(|f| f == "crt-static");
    let target = std::env::var("TARGET").unwrap_or_default();
    let profile = profile_name().unwrap_or_default();
    let linkage = if static_crt { "static" } else { "dynamic" };
    println!(
        "cargo:rustc-env=BUILD_INTAKE_FEATURES={target}, {profile}, {linkage}, tls=rustls+ring"
    );
}

/// The cargo profile being built (`release`, `dist`, ...). Cargo's `PROFILE` says only `debug`
/// or `release` (a custom profile inherits one of them); the name is the folder of
/// `target/[TRIPLE/]NAME/build/intake-HASH/out`.
fn profile_name() -> Option<String> {
    let out = std::env::var("OUT_DIR").ok()?;
    let name = Path::new(&out).ancestors().nth(3)?.file_name()?;
    Some(name.to_string_lossy().into_owned())
}

/// `BUILD_INTAKE_COMMIT` (for builds from a source tarball), else `git rev-parse --short HEAD`;
/// `None` outside a git checkout.
fn git_commit() -> Option<String> {
    if let Ok(commit) = std::env::var("BUILD_INTAKE_COMMIT") {
        return Some(commit);
    }
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        out.status.success().then(|| text.trim().to_string())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    // Rebuild when HEAD moves: HEAD itself (checkout), the branch it points to (commit), and
    // packed-refs (where the branch may live). `--git-path` resolves them in a worktree too.
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(commit)
}
