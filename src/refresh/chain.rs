//! The symlink chain of a token path, and what to watch for it.
//!
//! A token path is often a chain of symlinks (`ln -s` to a Vault agent sink, the kubelet's
//! `token -> ..data/token` with `..data -> ..2026_11_29_…`), and the file read changes when
//! any link on the way is re-pointed or the file at the end is replaced.
//!
//! [`Start::resolve`] follows the chain link by link, as the kernel does at `open`, and
//! returns what to watch, each as a name in its directory (which survives a rename over
//! it): every link, and the file at the end. Not watched: the directories above the path
//! as given (its parent is canonicalized once), and what lies inside a directory reached
//! through a link whose name starts with `..` (an atomic writer's payload, replaced by
//! re-pointing that link).
//!
//! A missing part ends the chain: its name is watched in the last directory that exists,
//! so that its return is an event. Over [`MAX_LINKS`] links the chain is taken to loop;
//! what was found up to there is still watched.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// The most links followed, as the kernel's own limit (`MAXSYMLINKS`).
pub(crate) const MAX_LINKS: usize = 40;

/// A name to watch in a directory (canonical).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Entry {
    pub(crate) dir: PathBuf,
    pub(crate) name: OsString,
}

/// Why a chain cannot be followed to its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ChainError {
    /// More links than the kernel follows: a loop, or a chain too long to open.
    #[error("the symlink chain of token file {path} has over {limit} links (a loop?)")]
    TooManyLinks { path: PathBuf, limit: usize },
}

/// What to watch for a token path: its chain's entries, first the path as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Chain {
    pub(crate) entries: Vec<Entry>,
    pub(crate) error: Option<ChainError>,
}

/// The token path as given: its canonical directory and its name.
#[derive(Debug, Clone)]
pub(crate) struct Start {
    path: PathBuf,
    dir: PathBuf,
    name: OsString,
}

enum Step {
    Root,
    Parent,
    Name(OsString),
    /// From here on, the directory is an atomic writer's payload.
    Payload,
}

impl Start {
    /// The start of `path`'s chain: its parent, canonicalized.
    pub(crate) fn of(path: &Path) -> Self {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = std::fs::canonicalize(parent)
            .or_else(|_| std::path::absolute(parent))
            .unwrap_or_else(|_| parent.to_owned());
        Self {
            path: path.to_owned(),
            dir,
            name: path.file_name().unwrap_or_default().to_owned(),
        }
    }

    /// Follows the chain as it is now.
    pub(crate) fn resolve(&self) -> Chain {
        let mut chain = Chain::default();
        let (mut base, mut payload, mut links) = (self.dir.clone(), false, 0);
        let mut steps = VecDeque::from([Step::Name(self.name.clone())]);
        while let Some(step) = steps.pop_front() {
            let Step::Name(name) = step else {
                match step {
                    Step::Root => base = PathBuf::from("/"),
                    Step::Parent => _ = base.pop(),
                    _ => {}
                }
                // Until a payload's link, or a step out of it.
                payload = matches!(step, Step::Payload);
                continue;
            };
            let last = !steps.iter().any(|s| matches!(s, Step::Name(_)));
            let path = base.join(&name);
            let meta = std::fs::symlink_metadata(&path);
            let link = meta.as_ref().is_ok_and(|m| m.file_type().is_symlink());
            if !last && !link && meta.is_ok_and(|m| m.is_dir()) {
                base = path;
                continue;
            }
            // A link, the file at the end, or what is missing (its return is an event here).
            // A payload's names are not watched: the link into it is.
            let entry = Entry {
                dir: base.clone(),
                name,
            };
            if !payload && !chain.entries.contains(&entry) {
                chain.entries.push(entry.clone());
            }
            links += 1;
            if !link {
                break;
            } else if links > MAX_LINKS {
                let (path, limit) = (self.path.clone(), MAX_LINKS);
                chain.error = Some(ChainError::TooManyLinks { path, limit });
                break;
            }
            // Removed since: the event that says so wakes the watcher again.
            let Ok(target) = std::fs::read_link(&path) else {
                break;
            };
            let mut front: Vec<Step> = (target.components())
                .filter_map(|component| match component {
                    Component::RootDir => Some(Step::Root),
                    Component::ParentDir => Some(Step::Parent),
                    Component::Normal(name) => Some(Step::Name(name.to_owned())),
                    Component::CurDir | Component::Prefix(_) => None,
                })
                .collect();
            // An atomic writer's own name (the kubelet's `..data`, its timestamped
            // directories): no user file can start with `..`.
            if !last && entry.name.as_encoded_bytes().starts_with(b"..") {
                front.push(Step::Payload);
            }
            for step in front.into_iter().rev() {
                steps.push_front(step);
            }
        }
        chain
    }
}

// The tests make symlinks the Unix way.
#[cfg(all(test, unix))]
mod tests;
