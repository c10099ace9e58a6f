//! What the kernel says of this process's resources, from /proc/self: inotify instances
//! and watches, threads. Seen from outside the crate, as an operator would count them.

use std::path::{Path, PathBuf};

/// The process's inotify instances: their fdinfo files.
fn inotify_instances() -> Vec<PathBuf> {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    fds.filter_map(|e| {
        let path = e.ok()?.path();
        if std::fs::read_link(&path).ok()? != Path::new("anon_inode:inotify") {
            return None;
        }
        Some(Path::new("/proc/self/fdinfo").join(path.file_name()?))
    })
    .collect()
}

/// The process's inotify instances (file descriptors).
pub fn inotify_fds() -> usize {
    inotify_instances().len()
}

/// The watches the kernel holds for the process's inotify instances (one `inotify wd:`
/// line each in their fdinfo).
pub fn inotify_watches() -> usize {
    inotify_instances()
        .iter()
        .filter_map(|info| std::fs::read_to_string(info).ok())
        .map(|info| {
            info.lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count()
        })
        .sum()
}

/// The process's threads whose name starts with `prefix`, with the CPU time each has used
/// (user and system, in clock ticks).
pub fn threads(prefix: &str) -> Vec<u64> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| {
            let task = e.ok()?.path();
            let comm = std::fs::read_to_string(task.join("comm")).ok()?;
            if !comm.starts_with(prefix) {
                return None;
            }
            // The fields after the name, which is in parentheses: utime and stime are the
            // 12th and 13th of them.
            let stat = std::fs::read_to_string(task.join("stat")).ok()?;
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            Some(fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?)
        })
        .collect()
}
