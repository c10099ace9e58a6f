//! Real proxies, each a child process of the test on a loopback port, killed when dropped:
//! tinyproxy (HTTP `CONNECT`, with a password) and microsocks (SOCKS5, with a password);
//! and [`child`], a test run again in a process whose environment names one.
//!
//! Where a proxy is not installed, its constructor says the test is skipped and returns
//! `None`, unless `BEARER_RELOAD_REQUIRE_PROXIES` is set (as `.ci/run` sets it): then it
//! panics. Self-contained, for the binaries that include it with `#[path]`.
#![allow(dead_code, unreachable_pub)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// A tinyproxy on 127.0.0.1 that takes `user:password` (basic authorization) and
/// tunnels to any port (its config has no `ConnectPort` line).
pub struct HttpProxy(Proxy);

impl HttpProxy {
    /// `user` and `password` of lower-case letters and digits (tinyproxy 1.11.1 takes no
    /// others); `None` when tinyproxy is not installed.
    pub async fn start_with_auth(user: &str, password: &str) -> Option<Self> {
        let proxy = Proxy::start("tinyproxy", "tinyproxy-bin", user, password, |dir, port| {
            let config = dir.join("tinyproxy.conf");
            let log = dir.join("log");
            let text = format!(
                "Port {port}\nListen 127.0.0.1\nAllow 127.0.0.1\nMaxClients 256\n\
                 LogLevel Info\nLogFile \"{}\"\nBasicAuth {user} {password}\n",
                log.display()
            );
            std::fs::write(&config, text).unwrap();
            let mut command = Command::new("tinyproxy");
            command.arg("-d").arg("-c").arg(config);
            command
        })
        .await?;
        Some(Self(proxy))
    }

    /// `http://user:password@127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.0.url("http")
    }

    /// Its log.
    pub fn log(&self) -> String {
        read(&self.0.dir.path().join("log"))
    }

    /// How many tunnels it opened to `target` (`host:port`): tinyproxy logs
    /// `opensock: opening connection to HOST:PORT` once it authenticated a `CONNECT`, and
    /// `opensock: Could not establish a connection to HOST:PORT` when that failed.
    pub fn connects_to(&self, target: &str) -> usize {
        let log = self.log();
        let count = |what: &str| {
            let line = format!("]: opensock: {what} {target}");
            log.lines().filter(|l| l.ends_with(&line)).count()
        };
        count("opening connection to") - count("Could not establish a connection to")
    }
}

/// A microsocks on 127.0.0.1 that takes `user:password`.
pub struct SocksProxy(Proxy);

impl SocksProxy {
    /// `None` when microsocks is not installed.
    pub async fn start_with_auth(user: &str, password: &str) -> Option<Self> {
        let proxy = Proxy::start("microsocks", "microsocks", user, password, |_, port| {
            let mut command = Command::new("microsocks");
            let port = port.to_string();
            command.args(["-i", "127.0.0.1", "-p", &port, "-u", user, "-P", password]);
            command
        })
        .await?;
        Some(Self(proxy))
    }

    /// `socks5h://user:password@127.0.0.1:PORT`: the proxy resolves host names.
    pub fn url(&self) -> String {
        self.0.url("socks5h")
    }

    /// How many connections it made to `target` (`host:port` as the client named it):
    /// microsocks prints `client[N] 127.0.0.1: connected to HOST:PORT` for each.
    pub fn connects_to(&self, target: &str) -> usize {
        let line = format!(": connected to {target}");
        let output = read(&self.0.dir.path().join("output"));
        output.lines().filter(|l| l.ends_with(&line)).count()
    }
}

/// A proxy process, its files in `dir`.
struct Proxy {
    _child: Child,
    dir: tempfile::TempDir,
    addr: SocketAddr,
    userinfo: String,
}

impl Proxy {
    /// `command(dir, port)` on a free port, its output in `dir/output`, once it accepts
    /// connections; started again on another port if it exits (it lost the port).
    async fn start(
        program: &str,
        package: &str,
        user: &str,
        password: &str,
        command: impl Fn(&Path, u16) -> Command,
    ) -> Option<Self> {
        if !installed(program, package) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..3 {
            let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .unwrap()
                .port();
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let output = std::fs::File::create(dir.path().join("output")).unwrap();
            let mut child = command(dir.path(), port)
                .stdin(Stdio::null())
                .stdout(output.try_clone().unwrap())
                .stderr(output)
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
            let start = Instant::now();
            while child.try_wait().unwrap().is_none() {
                if tokio::net::TcpStream::connect(addr).await.is_ok() {
                    let userinfo = format!("{user}:{password}@");
                    return Some(Self {
                        _child: child,
                        dir,
                        addr,
                        userinfo,
                    });
                }
                let output = read(&dir.path().join("output"));
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "{program} is not up: {output}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        panic!(
            "{program} exited three times: {}",
            read(&dir.path().join("output"))
        );
    }

    fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}{}", self.userinfo, self.addr)
    }
}

/// Whether `program` is on `PATH`; if not, says the test is skipped, or panics where
/// `BEARER_RELOAD_REQUIRE_PROXIES` is set.
fn installed(program: &str, package: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| dir.join(program).is_file()) {
        return true;
    }
    let why = format!("`{program}` is not installed (`apt-get install {package}`)");
    assert!(
        std::env::var_os("BEARER_RELOAD_REQUIRE_PROXIES").is_none(),
        "{why}"
    );
    let thread = std::thread::current();
    eprintln!(
        "{}: skipped, {why}",
        thread.name().unwrap_or("a proxy test")
    );
    false
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// This test binary run again for its test `test` alone (an ignored one, which the child
/// runs; named as the harness names it, [`super::alone::test_name`]), with `env` added: a
/// test of what a process reads from its environment (`HTTPS_PROXY`), which no test can
/// change for itself alone.
pub fn child(test: &str, env: &[(&str, &str)]) -> Command {
    assert_eq!(
        super::alone::listed(test),
        1,
        "no test {test} for the child to run"
    );
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([test, "--exact", "--ignored", "--nocapture"]);
    // The parent's own proxy settings are not the test's.
    for name in [
        "NO_PROXY",
        "no_proxy",
        "ALL_PROXY",
        "all_proxy",
        "https_proxy",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied()).kill_on_drop(true);
    command
}

/// The value of `name`, which the parent test of a child ([`child`]) sets.
pub fn from_parent(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} unset: run by its parent test"))
}
