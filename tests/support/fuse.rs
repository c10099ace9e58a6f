//! A FUSE filesystem the tests mount themselves, to stand for a mount that stops answering
//! (a hung NFS server, a CSI driver that died): an in-memory tree of directories, files and
//! symlinks that answers like a local filesystem (so the kubelet's writer can lay out a
//! projected volume on it) until the test makes it hang. From then on every request,
//! whatever it is (lookup, getattr, readlink, open, read, readdir, write, rename, ...), is
//! held unanswered, and the thread that made it waits in the kernel, as on a hung mount,
//! until the test releases the mount: each held request is then answered with `EIO`, and
//! later ones as before.
//!
//! Every answer carries a time-to-live of zero and every file is opened for direct I/O, so
//! that the kernel serves nothing from its caches: each `stat`, `readlink` and `open` of a
//! path on the mount is a request.
//!
//! Linux only (the `fuser` crate mounts through `/dev/fuse` with `mount(2)` as root, else
//! with `fusermount3`). Included by the test binaries that use it (`#[path =
//! "support/fuse.rs"] mod fuse;`, next to `mod support;`), so that the others do not
//! compile `fuser`.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

/// Nothing is cached by the kernel: every path walk asks the filesystem.
const TTL: Duration = Duration::ZERO;

/// A mounted [hanging filesystem](self), unmounted when dropped (after releasing every
/// held request, so that no thread of the test process stays stuck on it).
pub struct HangingMount {
    dir: PathBuf,
    gate: Arc<Gate>,
    session: Option<fuser::BackgroundSession>,
}

/// A request held unanswered: what it asks, and the thread that waits for it.
#[derive(Debug, Clone)]
pub struct Held {
    /// The FUSE operation (`lookup`, `getattr`, `open`, ...).
    pub op: &'static str,
    /// What it is about: a name and its directory's inode, or an inode.
    pub what: String,
    /// The mount point.
    pub mount: PathBuf,
    /// The kernel's id of the thread that made it (its `gettid`).
    pub tid: u32,
}

impl fmt::Display for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} on {} by {}",
            self.op,
            self.what,
            self.mount.display(),
            thread_name(self.tid)
        )
    }
}

/// The name of thread `tid` of this process and the system call it waits in, as the
/// kernel shows them (`tokio-runtime-w` in `statx`), or that it is not ours.
pub fn thread_name(tid: u32) -> String {
    let task = PathBuf::from(format!("/proc/self/task/{tid}"));
    let Ok(comm) = std::fs::read_to_string(task.join("comm")) else {
        return format!("thread {tid} (not of this process)");
    };
    // The kernel stack (root only): its system call entry says what the thread waits in.
    let syscall = std::fs::read_to_string(task.join("stack"))
        .ok()
        .and_then(|stack| {
            stack.lines().find_map(|frame| {
                let name = frame.split_whitespace().nth(1)?;
                let name = name.split('+').next()?;
                ["__x64_sys_", "__arm64_sys_", "__do_sys_"]
                    .iter()
                    .find_map(|prefix| name.strip_prefix(prefix))
                    .map(str::to_owned)
            })
        })
        .map(|s| format!(" in {s}"))
        .unwrap_or_default();
    format!("thread {tid} `{}`{syscall}", comm.trim())
}

impl HangingMount {
    /// Mounts an empty filesystem on the directory `dir` (which must exist), answering.
    ///
    /// # Errors
    ///
    /// Why FUSE cannot be used here: no `/dev/fuse`, or the mount failed (no privilege,
    /// no `fusermount3`).
    pub fn mount(dir: &Path) -> Result<Self, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("there is no /dev/fuse".into());
        }
        let gate = Arc::new(Gate {
            mount: dir.to_owned(),
            ..Gate::default()
        });
        let fs = MemFs {
            tree: Mutex::new(Tree::new(&uid_gid_of(dir))),
            gate: gate.clone(),
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            MountOption::FSName("hanging".into()),
            MountOption::Subtype("bearer-reload-test".into()),
            MountOption::RW,
        ];
        let session = fuser::spawn_mount(fs, dir, &config)
            .map_err(|e| format!("cannot mount a FUSE filesystem on {}: {e}", dir.display()))?;
        Ok(Self {
            dir: dir.to_owned(),
            gate,
            session: Some(session),
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// From now on, every request is held unanswered.
    pub fn hang(&self) {
        self.gate.lock().mode = Mode::Hang;
    }

    /// The next request of operation `op` (`rename`, `flush`, ...) is done and answered,
    /// then every request is held: the test picks the moment the mount stops answering
    /// (right after the kubelet's switch of `..data`, right after a reader closes the file).
    pub fn hang_after(&self, op: &'static str) {
        self.gate.lock().mode = Mode::HangAfter(op);
    }

    /// Whether requests are being held.
    pub fn hanging(&self) -> bool {
        self.gate.lock().mode == Mode::Hang
    }

    /// The requests held now.
    pub fn held(&self) -> Vec<Held> {
        self.gate
            .lock()
            .held
            .iter()
            .map(|(h, _)| h.clone())
            .collect()
    }

    /// Waits until at least one request is held; `None` if none came within `deadline`.
    pub fn wait_until_held(&self, deadline: Duration) -> Option<Vec<Held>> {
        self.wait_until_held_such(deadline, |_| true)
    }

    /// Waits until a request that `such` accepts is held; then every request held, or
    /// `None` if none came within `deadline`.
    pub fn wait_until_held_such(
        &self,
        deadline: Duration,
        such: impl Fn(&Held) -> bool,
    ) -> Option<Vec<Held>> {
        let start = Instant::now();
        let mut gate = self.gate.lock();
        while !gate.held.iter().any(|(h, _)| such(h)) {
            let left = deadline.checked_sub(start.elapsed())?;
            gate = self
                .gate
                .changed
                .wait_timeout(gate, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Some(gate.held.iter().map(|(h, _)| h.clone()).collect())
    }

    /// Answers every held request with `EIO`, and every later one as before the hang.
    pub fn release(&self) {
        let held = {
            let mut gate = self.gate.lock();
            gate.mode = Mode::Answer;
            std::mem::take(&mut gate.held)
        };
        for (_, answer) in held {
            answer(Errno::EIO);
        }
    }
}

impl Drop for HangingMount {
    fn drop(&mut self) {
        self.release();
        let Some(session) = self.session.take() else {
            return;
        };
        // A plain unmount ends the session; a busy mount (a file still open) is detached
        // instead, and its session ends with the last reference. Bounded either way: a
        // test that failed must not hang on its way out.
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(session.umount_and_join());
        });
        match wait.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => {
                let _ = rustix::mount::unmount(&self.dir, rustix::mount::UnmountFlags::DETACH);
            }
        }
    }
}

fn uid_gid_of(dir: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).map_or((0, 0), |m| (m.uid(), m.gid()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    #[default]
    Answer,
    Hang,
    HangAfter(&'static str),
}

/// Answers a held request with an error.
type Answer = Box<dyn FnOnce(Errno) + Send>;

#[derive(Default)]
struct Gate {
    mount: PathBuf,
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    mode: Mode,
    held: Vec<(Held, Answer)>,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `reply` to answer now, or `None` when the mount hangs: then it is held, to be
    /// answered with an error on release.
    fn admit<R: Send + 'static>(
        &self,
        req: &Request,
        op: &'static str,
        what: impl FnOnce() -> String,
        reply: R,
        error: fn(R, Errno),
    ) -> Option<R> {
        let mut gate = self.lock();
        if gate.mode != Mode::Hang {
            return Some(reply);
        }
        let held = Held {
            op,
            what: what(),
            mount: self.mount.clone(),
            tid: req.pid(),
        };
        gate.held.push((held, Box::new(move |e| error(reply, e))));
        self.changed.notify_all();
        None
    }

    /// Hangs from now on if asked to after an `op`: called after doing it, before
    /// answering it, so that what its answer sets off finds the mount hung.
    fn done(&self, op: &'static str) {
        let mut gate = self.lock();
        if gate.mode == Mode::HangAfter(op) {
            gate.mode = Mode::Hang;
        }
    }
}

enum Kind {
    Dir(BTreeMap<OsString, u64>),
    File(Vec<u8>),
    Link(PathBuf),
}

struct Node {
    kind: Kind,
    perm: u16,
    uid: u32,
    gid: u32,
    mtime: SystemTime,
}

struct Tree {
    nodes: HashMap<u64, Node>,
    next: u64,
}

impl Tree {
    fn new(&(uid, gid): &(u32, u32)) -> Self {
        let root = Node {
            kind: Kind::Dir(BTreeMap::new()),
            perm: 0o755,
            uid,
            gid,
            mtime: SystemTime::now(),
        };
        Self {
            nodes: HashMap::from([(INodeNo::ROOT.0, root)]),
            next: INodeNo::ROOT.0 + 1,
        }
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let node = self.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        let (kind, size, nlink) = match &node.kind {
            Kind::Dir(_) => (FileType::Directory, 0, 2),
            Kind::File(data) => (FileType::RegularFile, data.len() as u64, 1),
            Kind::Link(target) => (FileType::Symlink, target.as_os_str().len() as u64, 1),
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: node.mtime,
            mtime: node.mtime,
            ctime: node.mtime,
            crtime: node.mtime,
            kind,
            perm: node.perm,
            nlink,
            uid: node.uid,
            gid: node.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn dir(&self, ino: u64) -> Result<&BTreeMap<OsString, u64>, Errno> {
        match &self.nodes.get(&ino).ok_or(Errno::ENOENT)?.kind {
            Kind::Dir(entries) => Ok(entries),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut BTreeMap<OsString, u64>, Errno> {
        match &mut self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?.kind {
            Kind::Dir(entries) => Ok(entries),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        self.dir(parent)?.get(name).copied().ok_or(Errno::ENOENT)
    }

    fn add(
        &mut self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        kind: Kind,
        perm: u32,
    ) -> Result<FileAttr, Errno> {
        if self.dir(parent)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let ino = self.next;
        self.next += 1;
        let node = Node {
            kind,
            perm: (perm & 0o7777) as u16,
            uid: req.uid(),
            gid: req.gid(),
            mtime: SystemTime::now(),
        };
        self.nodes.insert(ino, node);
        self.dir_mut(parent)?.insert(name.to_owned(), ino);
        self.attr(ino)
    }

    fn is_empty_dir(&self, ino: u64) -> Option<bool> {
        match &self.nodes.get(&ino)?.kind {
            Kind::Dir(entries) => Some(entries.is_empty()),
            _ => None,
        }
    }

    /// Removes `name` from `parent`: a directory (which must be empty) when `dir`, else
    /// anything but a directory.
    fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = self.child(parent, name)?;
        match (self.is_empty_dir(ino), dir) {
            (Some(false), true) => return Err(Errno::ENOTEMPTY),
            (Some(true), true) | (None, false) => {}
            (None, true) => return Err(Errno::ENOTDIR),
            (Some(_), false) => return Err(Errno::EISDIR),
        }
        self.dir_mut(parent)?.remove(name);
        self.nodes.remove(&ino);
        Ok(())
    }

    fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return Err(Errno::EINVAL);
        }
        let ino = self.child(parent, name)?;
        self.dir(new_parent)?;
        if let Ok(old) = self.child(new_parent, new_name) {
            if old == ino {
                return Ok(());
            }
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            match (self.is_empty_dir(ino).is_some(), self.is_empty_dir(old)) {
                (_, Some(false)) => return Err(Errno::ENOTEMPTY),
                (true, None) => return Err(Errno::ENOTDIR),
                (false, Some(_)) => return Err(Errno::EISDIR),
                _ => {}
            }
            self.nodes.remove(&old);
        }
        self.dir_mut(parent)?.remove(name);
        self.dir_mut(new_parent)?.insert(new_name.to_owned(), ino);
        Ok(())
    }
}

/// The filesystem: the tree, behind the gate that holds requests while the mount hangs.
struct MemFs {
    tree: Mutex<Tree>,
    gate: Arc<Gate>,
}

impl MemFs {
    fn tree(&self) -> MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn in_dir(parent: INodeNo, name: &OsStr) -> impl FnOnce() -> String {
    let name = name.to_owned();
    move || format!("{name:?} in inode {}", parent.0)
}

fn inode(ino: INodeNo) -> impl FnOnce() -> String {
    move || format!("of inode {}", ino.0)
}

impl Filesystem for MemFs {
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(reply) = self.gate.admit(
            req,
            "lookup",
            in_dir(parent, name),
            reply,
            ReplyEntry::error,
        ) else {
            return;
        };
        let tree = self.tree();
        match tree.child(parent.0, name).and_then(|ino| tree.attr(ino)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let Some(reply) = self
            .gate
            .admit(req, "getattr", inode(ino), reply, ReplyAttr::error)
        else {
            return;
        };
        match self.tree().attr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(reply) = self
            .gate
            .admit(req, "setattr", inode(ino), reply, ReplyAttr::error)
        else {
            return;
        };
        let mut tree = self.tree();
        let Some(node) = tree.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(mode) = mode {
            node.perm = (mode & 0o7777) as u16;
        }
        if let Some(size) = size {
            match &mut node.kind {
                Kind::File(data) => {
                    let Ok(size) = usize::try_from(size) else {
                        return reply.error(Errno::EINVAL);
                    };
                    data.resize(size, 0);
                }
                _ => return reply.error(Errno::EISDIR),
            }
        }
        node.mtime = SystemTime::now();
        match tree.attr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let Some(reply) = self
            .gate
            .admit(req, "readlink", inode(ino), reply, ReplyData::error)
        else {
            return;
        };
        match self.tree().nodes.get(&ino.0).map(|n| &n.kind) {
            Some(Kind::Link(target)) => reply.data(target.as_os_str().as_encoded_bytes()),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let Some(reply) =
            self.gate
                .admit(req, "mkdir", in_dir(parent, name), reply, ReplyEntry::error)
        else {
            return;
        };
        let kind = Kind::Dir(BTreeMap::new());
        match self.tree().add(req, parent.0, name, kind, mode & !umask) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(reply) = self.gate.admit(
            req,
            "unlink",
            in_dir(parent, name),
            reply,
            ReplyEmpty::error,
        ) else {
            return;
        };
        match self.tree().remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(reply) =
            self.gate
                .admit(req, "rmdir", in_dir(parent, name), reply, ReplyEmpty::error)
        else {
            return;
        };
        match self.tree().remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let Some(reply) = self.gate.admit(
            req,
            "symlink",
            in_dir(parent, link_name),
            reply,
            ReplyEntry::error,
        ) else {
            return;
        };
        let kind = Kind::Link(target.to_owned());
        match self.tree().add(req, parent.0, link_name, kind, 0o777) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let Some(reply) = self.gate.admit(
            req,
            "rename",
            in_dir(parent, name),
            reply,
            ReplyEmpty::error,
        ) else {
            return;
        };
        let renamed = self
            .tree()
            .rename(parent.0, name, newparent.0, newname, flags);
        match renamed {
            Ok(()) => {
                self.gate.done("rename");
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let Some(reply) = self
            .gate
            .admit(req, "open", inode(ino), reply, ReplyOpen::error)
        else {
            return;
        };
        match self.tree().nodes.get(&ino.0).map(|n| &n.kind) {
            Some(Kind::File(_)) => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            Some(Kind::Dir(_)) => reply.error(Errno::EISDIR),
            Some(Kind::Link(_)) => reply.error(Errno::ELOOP),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(reply) = self
            .gate
            .admit(req, "read", inode(ino), reply, ReplyData::error)
        else {
            return;
        };
        match self.tree().nodes.get(&ino.0).map(|n| &n.kind) {
            Some(Kind::File(data)) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = start.saturating_add(size as usize).min(data.len());
                reply.data(&data[start..end]);
            }
            Some(_) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let Some(reply) = self
            .gate
            .admit(req, "write", inode(ino), reply, ReplyWrite::error)
        else {
            return;
        };
        let mut tree = self.tree();
        let Some(node) = tree.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let Kind::File(bytes) = &mut node.kind else {
            return reply.error(Errno::EISDIR);
        };
        let Some(end) = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(data.len()))
        else {
            return reply.error(Errno::EFBIG);
        };
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[end - data.len()..end].copy_from_slice(data);
        node.mtime = SystemTime::now();
        reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX));
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if let Some(reply) = self
            .gate
            .admit(req, "flush", inode(ino), reply, ReplyEmpty::error)
        {
            self.gate.done("flush");
            reply.ok();
        }
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(reply) = self
            .gate
            .admit(req, "release", inode(ino), reply, ReplyEmpty::error)
        {
            reply.ok();
        }
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(reply) = self
            .gate
            .admit(req, "fsync", inode(ino), reply, ReplyEmpty::error)
        {
            reply.ok();
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let Some(reply) = self
            .gate
            .admit(req, "opendir", inode(ino), reply, ReplyOpen::error)
        else {
            return;
        };
        match self.tree().dir(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let Some(mut reply) =
            self.gate
                .admit(req, "readdir", inode(ino), reply, ReplyDirectory::error)
        else {
            return;
        };
        let tree = self.tree();
        let entries = match tree.dir(ino.0) {
            Ok(entries) => entries,
            Err(e) => return reply.error(e),
        };
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (ino.0, FileType::Directory, OsStr::new("..")),
        ];
        let children = entries.iter().filter_map(|(name, &child)| {
            let kind = tree.attr(child).ok()?.kind;
            Some((child, kind, name.as_os_str()))
        });
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (child, kind, name)) in dots.into_iter().chain(children).enumerate().skip(skip) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        if let Some(reply) =
            self.gate
                .admit(req, "releasedir", inode(ino), reply, ReplyEmpty::error)
        {
            reply.ok();
        }
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(reply) = self
            .gate
            .admit(req, "fsyncdir", inode(ino), reply, ReplyEmpty::error)
        {
            reply.ok();
        }
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        if let Some(reply) = self
            .gate
            .admit(req, "statfs", inode(ino), reply, ReplyStatfs::error)
        {
            reply.statfs(0, 0, 0, 0, 0, 4096, 255, 0);
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        if let Some(reply) = self
            .gate
            .admit(req, "getxattr", inode(ino), reply, ReplyXattr::error)
        {
            reply.error(Errno::NO_XATTR);
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, _size: u32, reply: ReplyXattr) {
        if let Some(reply) = self
            .gate
            .admit(req, "listxattr", inode(ino), reply, ReplyXattr::error)
        {
            reply.error(Errno::ENOTSUP);
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        if let Some(reply) = self
            .gate
            .admit(req, "access", inode(ino), reply, ReplyEmpty::error)
        {
            reply.ok();
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let Some(reply) = self.gate.admit(
            req,
            "create",
            in_dir(parent, name),
            reply,
            ReplyCreate::error,
        ) else {
            return;
        };
        match self
            .tree()
            .add(req, parent.0, name, Kind::File(Vec::new()), mode & !umask)
        {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }
}
