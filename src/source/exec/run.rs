//! One run of a plugin: spawn it, read its standard output up to a cap and the tail of its
//! standard error, wait for it.
//!
//! Everything here is asynchronous (`tokio::process`): no worker is blocked while a plugin
//! runs, and when the store drops a run that took too long, the child is dropped with it
//! and killed (`kill_on_drop`). On Unix, a plugin that does not share the terminal runs in
//! a process group of its own, killed whole when the run ends before the plugin does (a
//! time limit, an oversize output, a read error): a wrapper script's children (`sh -c
//! 'helper & wait'`), which `kill_on_drop` alone would leave running, go with it. A plugin
//! that shares the terminal stays in the terminal's foreground group, so that it may
//! prompt. Other systems (Windows) have no process group to kill without unsafe code (a
//! job object): there `kill_on_drop` ends the plugin itself, and its children live on.

use std::io;
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use zeroize::Zeroizing;

use super::ExecError;
use super::redact::Tail;

/// Whether the plugin gets the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Terminal {
    /// Standard input and standard error are the process's own: the plugin may prompt.
    Shared,
    /// Standard input is empty and standard error is captured for the error message.
    Detached,
}

/// What a run that exited left behind.
pub(super) struct Exited {
    pub(super) status: ExitStatus,
    /// Holds the token or the key: wiped when dropped.
    pub(super) stdout: Zeroizing<Vec<u8>>,
    /// The redacted tail of stderr; `None` when it went to the terminal.
    pub(super) stderr: Option<String>,
}

/// Runs `cmd` (its name `command` for errors), refusing more than `max_output` bytes of
/// standard output.
pub(super) async fn run(
    mut cmd: Command,
    command: &str,
    terminal: Terminal,
    max_output: usize,
) -> Result<Exited, ExecError> {
    let io_error = |source: io::Error| ExecError::Io {
        command: command.to_owned(),
        source,
    };
    cmd.stdout(Stdio::piped()).kill_on_drop(true);
    match terminal {
        Terminal::Shared => cmd.stdin(Stdio::inherit()).stderr(Stdio::inherit()),
        Terminal::Detached => cmd.stdin(Stdio::null()).stderr(Stdio::piped()),
    };
    #[cfg(unix)]
    if terminal == Terminal::Detached {
        cmd.process_group(0);
    }
    let mut child = cmd.spawn().map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => ExecError::NotFound {
            command: command.to_owned(),
            install_hint: None,
        },
        _ => ExecError::Start {
            command: command.to_owned(),
            source,
        },
    })?;
    // The group's id is the child's pid (`process_group(0)`).
    #[cfg(unix)]
    let mut group = Group(match terminal {
        Terminal::Detached => child.id(),
        Terminal::Shared => None,
    });
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take();
    let read_stdout = async {
        read_capped(stdout, max_output)
            .await
            .map_err(io_error)?
            .ok_or_else(|| ExecError::OutputTooLarge {
                command: command.to_owned(),
                max: max_output,
            })
    };
    let read_stderr = async {
        match stderr {
            Some(stderr) => read_tail(stderr).await.map(Some).map_err(io_error),
            None => Ok(None),
        }
    };
    // An oversize output ends the run at once: the child is dropped, and killed, here.
    let (stdout, stderr) = tokio::try_join!(read_stdout, read_stderr)?;
    let status = child.wait().await.map_err(io_error)?;
    // The plugin exited and its output is closed: what it left running (a daemon that
    // closed its output) is its own business.
    #[cfg(unix)]
    {
        group.0 = None;
    }
    Ok(Exited {
        status,
        stdout,
        stderr: stderr.map(Tail::into_message),
    })
}

/// A plugin's process group, killed when dropped unless the run finished.
#[cfg(unix)]
struct Group(Option<u32>);

#[cfg(unix)]
impl Drop for Group {
    fn drop(&mut self) {
        let Some(pgid) = self.0.and_then(|id| i32::try_from(id).ok()) else {
            return;
        };
        let Some(pgid) = rustix::process::Pid::from_raw(pgid) else {
            return;
        };
        // ESRCH: the group is gone already.
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
}

/// Reads `r` to its end into wiped memory; `None` as soon as it holds more than `max`
/// bytes.
async fn read_capped(
    mut r: impl AsyncRead + Unpin,
    max: usize,
) -> io::Result<Option<Zeroizing<Vec<u8>>>> {
    let mut bytes = Zeroizing::new(Vec::new());
    let mut chunk = Zeroizing::new([0_u8; 8192]);
    loop {
        let n = r.read(&mut chunk[..]).await?;
        if n == 0 {
            return Ok(Some(bytes));
        }
        let len = bytes.len() + n;
        if len > max {
            return Ok(None);
        }
        // Grown by hand: a `Vec`'s own growth frees the old buffer without wiping it.
        if len > bytes.capacity() {
            let mut grown = Zeroizing::new(Vec::with_capacity(len.max(bytes.capacity() * 2)));
            grown.extend_from_slice(&bytes);
            bytes = grown;
        }
        bytes.extend_from_slice(&chunk[..n]);
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
