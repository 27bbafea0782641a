//! Writing a secret (the kubeconfig, which holds the admin key) to a path the caller names,
//! without handing it to another local user.
//!
//! Owns [`write()`]. Invariants:
//! - a new file is created with `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600: never through a
//!   link, never into a file someone else created in the meantime;
//! - an existing path is replaced only when it is a regular file (not a link, a fifo, a
//!   device, a directory) owned by this process's user, and then atomically: the data goes
//!   to a new 0600 file in the same directory, renamed over the old name (a rename replaces
//!   the name, it follows no link), so the old file's owner, mode and links never see it;
//! - anything else is an error and the path is left as it was.

use std::io::Write;
use std::path::Path;

/// Why an existing `path` may not be replaced, `None` when it may: a regular file (`file`)
/// owned by `owner`, the user being `me`.
pub(crate) fn existing_unfit(file: bool, owner: u32, me: u32) -> Option<String> {
    if !file {
        return Some(
            "it exists and is not a regular file (a link, a directory, a device, ...): \
             refusing to write the admin credential through it"
                .into(),
        );
    }
    if owner != me {
        return Some(format!(
            "it exists and is owned by uid {owner}, not by this user (uid {me}): refusing \
             to hand it the admin credential"
        ));
    }
    None
}

/// Checks that `path` may be written by [`write()`] (missing, or a regular file of this user),
/// without writing: a caller can fail before starting anything.
///
/// # Errors
/// `path` exists and is not a regular file of this user, or cannot be examined.
pub fn check(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => refuse_unless_own_file(&meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(unix)]
fn refuse_unless_own_file(meta: &std::fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    match existing_unfit(meta.file_type().is_file(), meta.uid(), me) {
        Some(why) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        )),
        None => Ok(()),
    }
}

#[cfg(not(unix))]
fn refuse_unless_own_file(meta: &std::fs::Metadata) -> std::io::Result<()> {
    match existing_unfit(meta.file_type().is_file(), 0, 0) {
        Some(why) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        )),
        None => Ok(()),
    }
}

/// Writes `data` at `path` as a file only this user can read (see the module's invariants).
///
/// # Errors
/// `path` exists and is not a regular file of this user; the file or its replacement could
/// not be written.
pub fn write(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
        // `create_new` (O_EXCL) already refuses a link; said here, not assumed.
        let nofollow = rustix::fs::OFlags::NOFOLLOW.bits();
        opts.custom_flags(i32::try_from(nofollow).unwrap_or(0));
    }
    match opts.open(path) {
        Ok(mut file) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                // The umask cannot widen 0600, but a narrower one would leave the owner
                // unable to read it.
                file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            }
            file.write_all(data)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => replace(path, data),
        Err(e) => Err(e),
    }
}

/// Replaces the existing file at `path`, when [`check`] allows it, by a new one renamed
/// over it.
fn replace(path: &Path, data: &[u8]) -> std::io::Result<()> {
    check(path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // tempfile creates it with O_EXCL, mode 0600, under a random name.
    let mut tmp = tempfile::Builder::new()
        .prefix(".kubeconfig-")
        .tempfile_in(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    tmp.write_all(data)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[cfg(unix)]
    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    /// Issue 28 (red team): `--kubeconfig LINK` wrote the admin credential through the link
    /// into the file it names (another user's, who could then read it). Now refused, and the
    /// target is untouched.
    #[cfg(unix)]
    #[test]
    fn a_link_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("theirs");
        std::fs::write(&target, b"their data").unwrap();
        let link = dir.path().join("kubeconfig");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = write(&link, b"secret").unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(check(&link).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"their data");
        // A dangling link (to where a file would be created) too.
        let missing = dir.path().join("missing");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(&missing, &dangling).unwrap();
        assert!(write(&dangling, b"secret").is_err());
        assert!(!missing.exists(), "nothing created through the link");
    }

    #[cfg(unix)]
    #[test]
    fn a_new_file_is_0600_and_an_own_file_is_replaced_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        write(&path, b"one").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        // Loosened by its owner, and hard-linked elsewhere: replaced, not rewritten in place.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let hard = dir.path().join("hard");
        std::fs::hard_link(&path, &hard).unwrap();
        write(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(
            std::fs::read(&hard).unwrap(),
            b"one",
            "the old inode is left alone"
        );
        // A directory is not a file.
        assert!(write(dir.path(), b"x").is_err());
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn another_users_file_is_refused() {
        assert!(existing_unfit(true, 0, 1000).unwrap().contains("uid 0"));
        assert!(existing_unfit(false, 1000, 1000).is_some());
        assert_eq!(existing_unfit(true, 1000, 1000), None);
    }
}
