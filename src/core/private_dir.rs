//! Folders only their owner may read: the data dir and backup folders, which hold the
//! key-encryption key.

use std::path::Path;

/// Creates a folder (and its parents) readable only by its owner, if missing: data dirs and
/// backup folders hold the key-encryption key.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}
