//! Reading a token file on the thread that reports its change (notify's), with no hop to
//! the blocking pool, when the kernel can promise that the read does not block.
//!
//! A blocking read belongs on the blocking pool, under the store's time limit: a dead
//! network mount or a FIFO without a writer can hang it for good. But a projected volume
//! is a tmpfs, and a file on a local disk that was just written is in the page cache;
//! there, the pool's hops (a tokio task, a blocking thread, back) cost several times the
//! read itself. So the slow path, which may block, checks that the file's directory is on
//! a local filesystem ([`LocalDir::check`]), and the fast path ([`read`]) uses only calls
//! that cannot wait on a server, a FIFO's writer or a disk's data:
//! - the directory is opened with `openat2(RESOLVE_CACHED)`, which fails rather than look
//!   up anything that is not in the kernel's cache, and must still be the device the slow
//!   path checked (`statx` with `AT_STATX_DONT_SYNC`: cached attributes, no round trip);
//! - the file is opened from there with `RESOLVE_NO_XDEV`, so its symlinks cannot lead
//!   off that filesystem (an absolute link may count as leaving it, where the process's
//!   root is another mount: the usual read takes it; not with `RESOLVE_CACHED`: a
//!   symlink the writer just made, as
//!   the kubelet does at each rotation, has its access time to update, which a cached
//!   lookup refuses), and `O_NONBLOCK`, so a FIFO does not wait for a writer; only a
//!   regular file is read;
//! - on a disk the read is `preadv2(RWF_NOWAIT)`, which fails rather than wait for the
//!   disk; a tmpfs or ramfs is memory (and takes no `RWF_NOWAIT`), read as it is.
//!
//! On a local disk the open may still wait briefly for the filesystem itself (a directory
//! block to read, the journal for the link's access time): milliseconds at worst, never a
//! dead server.
//!
//! Anything else (an error of any kind, a file over the cap, a mount point in the way)
//! gives `None`, and the caller reads the usual way.

use std::ffi::OsStr;
use std::path::Path;

use rustix::fd::OwnedFd;
use rustix::fs::{
    AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags, StatxFlags, makedev, openat2, statx,
};
use rustix::io::{ReadWriteFlags, pread, preadv2};

/// `statfs` magic numbers of the filesystems read this way (linux/magic.h).
const TMPFS: u64 = 0x0102_1994;
const RAMFS: u64 = 0x8584_58f6;
const DISKS: [u64; 5] = [
    0xef53,      // ext2, ext3, ext4
    0x5846_5342, // xfs
    0x9123_683e, // btrfs
    0xf2f5_2010, // f2fs
    0x794c_7630, // overlayfs (a container's root)
];

/// A directory found, on the slow path, to be on a local filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LocalDir {
    dev: u64,
    memory: bool,
}

impl LocalDir {
    /// Whether `dir` is on a filesystem the fast path reads. May block (a network mount
    /// answers `statfs` over the network): call it where a blocking read may run.
    pub(super) fn check(dir: &Path) -> Option<Self> {
        let fs = rustix::fs::statfs(dir).ok()?;
        // `f_type` is signed on some targets; the magic numbers are 32-bit.
        let kind = fs.f_type as u64 & 0xffff_ffff;
        let memory = match kind {
            TMPFS | RAMFS => true,
            k if DISKS.contains(&k) => false,
            _ => return None,
        };
        let dir = statx(
            CWD,
            dir,
            AtFlags::empty(),
            StatxFlags::TYPE | StatxFlags::INO,
        )
        .ok()?;
        Some(Self {
            dev: makedev(dir.stx_dev_major, dir.stx_dev_minor),
            memory,
        })
    }
}

/// Reads at most `max_size + 1` bytes of the regular file `name` in `dir` (a directory
/// that [`LocalDir::check`] found local), or `None` where that could block or fails.
pub(super) fn read(dir: &Path, name: &OsStr, local: LocalDir, max_size: usize) -> Option<Vec<u8>> {
    let dir_fd = openat2(
        CWD,
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::CACHED,
    )
    .ok()?;
    let dir_stat = cached_stat(&dir_fd)?;
    if makedev(dir_stat.stx_dev_major, dir_stat.stx_dev_minor) != local.dev {
        return None;
    }
    let file = openat2(
        &dir_fd,
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::NO_XDEV | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let stat = cached_stat(&file)?;
    if FileType::from_raw_mode(stat.stx_mode.into()) != FileType::RegularFile
        || stat.stx_size > max_size as u64
    {
        return None;
    }
    let cap = max_size.saturating_add(1);
    // One byte past the length the file had, to see it end (or grow).
    let mut bytes = vec![0; (stat.stx_size as usize).saturating_add(1).min(cap)];
    let mut len = 0;
    loop {
        if len == bytes.len() {
            if len == cap {
                break;
            }
            bytes.resize(len.saturating_mul(2).min(cap), 0);
        }
        let buf = &mut bytes[len..];
        let n = if local.memory {
            pread(&file, buf, len as u64)
        } else {
            preadv2(
                &file,
                &mut [std::io::IoSliceMut::new(buf)],
                len as u64,
                ReadWriteFlags::NOWAIT,
            )
        }
        .ok()?;
        if n == 0 {
            break;
        }
        len += n;
    }
    bytes.truncate(len);
    Some(bytes)
}

/// The attributes the kernel has, without asking a server for fresh ones.
fn cached_stat(fd: &OwnedFd) -> Option<rustix::fs::Statx> {
    statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC,
        StatxFlags::TYPE | StatxFlags::SIZE,
    )
    .ok()
}

#[cfg(test)]
mod tests;
