//! One run of a plugin: spawn it, read its standard output up to a cap and the tail of its
//! standard error, wait for it.
//!
//! A run the store drops kills the child (`kill_on_drop`) and, on Unix, its process group.
//! A plugin that shares the terminal stays in the terminal's foreground group, so that it
//! may prompt. Windows has no process group to kill without unsafe code (a job object).

use std::io;
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use zeroize::Zeroizing;

use super::redact::Tail;
use super::{ExecError, ExecSource, credential};

/// Runs `plugin`, sharing the terminal when `shared`: its standard output, once it exited
/// successfully.
pub(super) async fn run(
    plugin: &ExecSource,
    shared: bool,
) -> Result<Zeroizing<Vec<u8>>, ExecError> {
    let command = plugin.name();
    let io_error = |source| ExecError::Io {
        command: command.clone(),
        source,
    };
    let mut cmd = Command::new(&plugin.command);
    cmd.args(&plugin.args)
        .envs(plugin.env.iter().map(|(k, v)| (k, v)));
    for name in &plugin.drop_env {
        cmd.env_remove(name);
    }
    let info = credential::exec_info(plugin.api_version, shared, plugin.cluster.as_ref());
    cmd.env("KUBERNETES_EXEC_INFO", info);
    cmd.stdout(Stdio::piped()).kill_on_drop(true);
    if shared {
        cmd.stdin(Stdio::inherit()).stderr(Stdio::inherit());
    } else {
        cmd.stdin(Stdio::null()).stderr(Stdio::piped());
        #[cfg(unix)]
        cmd.process_group(0);
    }
    let mut child = cmd.spawn().map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => ExecError::NotFound {
            command: command.clone(),
            install_hint: plugin.install_hint.clone(),
        },
        _ => ExecError::Start {
            command: command.clone(),
            source,
        },
    })?;
    // The group's id is the child's pid (`process_group(0)`).
    #[cfg(unix)]
    let mut group = Group(child.id().filter(|_| !shared));
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take();
    let read_stdout = async {
        read_capped(stdout, plugin.max_output)
            .await
            .map_err(io_error)?
            .ok_or_else(|| ExecError::OutputTooLarge {
                command: command.clone(),
                max: plugin.max_output,
            })
    };
    let read_stderr = async {
        let Some(stderr) = stderr else {
            return Ok(None);
        };
        read_tail(stderr).await.map(Some).map_err(io_error)
    };
    // An oversize output ends the run at once: the child is dropped, and killed, here.
    let (stdout, stderr) = tokio::try_join!(read_stdout, read_stderr)?;
    let status = child.wait().await.map_err(io_error)?;
    // The plugin exited: what it left running (a daemon that closed its output) is its own.
    #[cfg(unix)]
    {
        group.0 = None;
    }
    if !status.success() {
        return Err(ExecError::Exit {
            command,
            status: describe_status(status),
            stderr: stderr.map(Tail::into_message),
        });
    }
    Ok(stdout)
}

/// `exited with status 1`, `was killed by signal 9`.
fn describe_status(status: ExitStatus) -> String {
    #[cfg(unix)]
    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
        return format!("was killed by signal {signal}");
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("ended abnormally ({status})"),
    }
}

/// A plugin's process group, killed when dropped unless the run finished.
#[cfg(unix)]
struct Group(Option<u32>);

#[cfg(unix)]
impl Drop for Group {
    fn drop(&mut self) {
        use rustix::process::{Pid, Signal, kill_process_group};
        let pid = self.0.and_then(|id| Pid::from_raw(i32::try_from(id).ok()?));
        if let Some(pgid) = pid {
            // ESRCH: the group is gone already.
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }
}

/// Reads `r` into wiped memory; `None` as soon as it holds more than `max` bytes.
async fn read_capped(
    mut r: impl AsyncRead + Unpin,
    max: usize,
) -> io::Result<Option<Zeroizing<Vec<u8>>>> {
    let mut bytes = Zeroizing::new(Vec::with_capacity(8192));
    loop {
        // Grown by hand: a `Vec`'s own growth frees the old buffer without wiping it.
        if bytes.len() == bytes.capacity() {
            let mut grown = Zeroizing::new(Vec::with_capacity(bytes.capacity() * 2));
            grown.extend_from_slice(&bytes);
            bytes = grown;
        }
        if r.read_buf(&mut *bytes).await? == 0 {
            return Ok(Some(bytes));
        }
        if bytes.len() > max {
            return Ok(None);
        }
    }
}

/// Reads `r` to its end, keeping only its tail.
async fn read_tail(mut r: impl AsyncRead + Unpin) -> io::Result<Tail> {
    let mut tail = Tail::default();
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf).await? {
            0 => return Ok(tail),
            n => tail.push(&buf[..n]),
        }
    }
}

#[cfg(test)]
mod tests;
