//! Many token files in one process: what a rotation and an idle minute cost.
//!
//! ```text
//! cargo run --release --example scale [-- --n 100 --n 1000 --n 10000 --layout onedir]
//! cargo run --release --example scale -- --n 1000 --layout onedir --source kubeconfig
//! ```
//!
//! For each N and layout, builds N stores (one per file; `dirs`: ten files a directory,
//! `onedir`: all N in one directory), measures the process's CPU while they sit idle, then
//! rotates 100 random files one at a time the way editors and agents do (a temporary file
//! renamed over the token) and prints one line:
//!
//! ```text
//! scale n=N layout=<dirs|onedir> source=<token|kubeconfig> reload_p50_ms= reload_p99_ms= reads_per_rotation= cpu_ms_per_rotation= idle_cpu_pct= threads_peak=
//! ```
//!
//! With `--source kubeconfig`, each file is a kubeconfig with an inline token and an inline
//! CA bundle (a controller's clusters, one kubeconfig each), loaded with
//! `Credentials::from_kubeconfig`: a store of the file, and a token store and a CA store
//! that follow it. The reads counted are the token stores', one per read of their file.
//!
//! - `reload_p50_ms`, `reload_p99_ms`: from the `rename` to the moment the rotated file's
//!   store carries the new token;
//! - `reads_per_rotation`: reads of any token file, by any store, per rotation;
//! - `cpu_ms_per_rotation`: the process's CPU time (every thread, `CLOCK_PROCESS_CPUTIME_ID`)
//!   over the rotations and a settling second after them, per rotation, the writer included;
//! - `idle_cpu_pct`: the process's CPU time over an idle window, in percent of one core;
//! - `threads_peak`: the most threads the process had (`/proc/self/status`), sampled every
//!   20 ms outside the idle window (the sampler is parked during it).
//!
//! Then the attributes of one directory change, an event for every file in it: a `#` line
//! says how long its stores took to re-read their files (each once, a few at a time).
//!
//! The stores' periodic timer is off unless `--refresh-secs` says otherwise, so that the
//! watcher's cost is measured alone.

#[path = "../tests/support/pki.rs"]
mod pki;
#[path = "../tests/support/procfs.rs"]
#[allow(dead_code, unreachable_pub)]
mod procfs;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bearer_reload::TokenStore;
use bearer_reload::kube::Credentials;
use bearer_reload::source::FileSource;
use clap::{Parser, ValueEnum};

/// Stores per directory in the `dirs` layout.
const PER_DIR: usize = 10;
/// How long a rotation may take to be seen before it counts as missed.
const MISSED_AFTER: Duration = Duration::from_secs(5);
/// The pause between two rotations, for the previous one's trailing events.
const BETWEEN: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Layout {
    /// Ten files a directory.
    Dirs,
    /// Every file in one directory.
    Onedir,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Source {
    /// Token files, a `TokenStore` each.
    Token,
    /// Kubeconfigs with an inline token and CA bundle, `Credentials::from_kubeconfig` each.
    Kubeconfig,
}

/// Scale figures: many stores, one rotation at a time.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Numbers of stores (repeat for several).
    #[arg(long = "n", default_values_t = [10_000])]
    n: Vec<usize>,
    /// Layouts to run (repeat for several; default both).
    #[arg(long, value_enum)]
    layout: Vec<Layout>,
    /// Files rotated, one at a time.
    #[arg(long, default_value_t = 100)]
    rotations: usize,
    /// Seconds of idle CPU measurement.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// The stores' periodic re-read, in seconds (default: off; a kubeconfig's: 60 s).
    #[arg(long)]
    refresh_secs: Option<u64>,
    /// What each file is.
    #[arg(long, value_enum, default_value = "token")]
    source: Source,
}

/// What file `i` holds when its token is `token`: the token, or a kubeconfig with it.
fn content(source: Source, ca_pem: &str, token: &str) -> String {
    match source {
        Source::Token => token.to_owned(),
        Source::Kubeconfig => serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {
                "server": "https://127.0.0.1:6443",
                "certificate-authority-data":
                    base64::engine::general_purpose::STANDARD.encode(ca_pem),
            }}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        })
        .to_string(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let layouts = if args.layout.is_empty() {
        vec![Layout::Dirs, Layout::Onedir]
    } else {
        args.layout.clone()
    };
    for &n in &args.n {
        for &layout in &layouts {
            run(&args, n, layout).await?;
        }
    }
    Ok(())
}

/// The process's CPU time, every thread included (those that have exited too).
fn cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The process's threads now.
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Samples the thread count every 20 ms, keeping the peak; parked (no wake-ups, no CPU)
/// while paused.
struct ThreadPeak {
    peak: Arc<AtomicUsize>,
    paused: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: std::thread::Thread,
}

impl ThreadPeak {
    fn start() -> Self {
        let peak = Arc::new(AtomicUsize::new(threads()));
        let (paused, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let thread = {
            let (peak, paused, stop) = (peak.clone(), paused.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if paused.load(Ordering::SeqCst) {
                        std::thread::park();
                        continue;
                    }
                    peak.fetch_max(threads(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .thread()
            .clone()
        };
        Self {
            peak,
            paused,
            stop,
            thread,
        }
    }

    fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::SeqCst);
        self.thread.unpark();
    }
}

impl Drop for ThreadPeak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// A small deterministic generator, so that runs rotate the same files.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Replaces `path` by a temporary file renamed over it; returns the instant of the rename.
fn rotate(path: &Path, token: &str) -> std::io::Result<Instant> {
    let name = path.file_name().expect("a file name").to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, token)?;
    let at = Instant::now();
    std::fs::rename(&tmp, path)?;
    Ok(at)
}

fn total_reads(stores: &[TokenStore]) -> u64 {
    stores.iter().map(|s| s.status().reads).sum()
}

async fn run(args: &Args, n: usize, layout: Layout) -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let ca_pem = pki::Ca::new("kubernetes").pem();
    let peak = ThreadPeak::start();
    let paths: Vec<PathBuf> = (0..n)
        .map(|i| match layout {
            Layout::Dirs => tmp.path().join(format!("d{}/t{i}", i / PER_DIR)),
            Layout::Onedir => tmp.path().join(format!("t{i}")),
        })
        .collect();
    for (i, path) in paths.iter().enumerate() {
        if i % PER_DIR == 0 {
            std::fs::create_dir_all(path.parent().expect("a directory"))?;
        }
        std::fs::write(path, content(args.source, &ca_pem, &format!("token-{i}-0")))?;
    }

    let load_start = Instant::now();
    let mut stores = Vec::with_capacity(n);
    let mut credentials = Vec::new();
    for path in &paths {
        let store = match args.source {
            Source::Token => {
                let builder = TokenStore::builder(FileSource::new(path));
                match args.refresh_secs {
                    Some(secs) => builder.refresh_interval(Duration::from_secs(secs)),
                    None => builder.no_periodic_refresh(),
                }
                .load()
                .await?
            }
            Source::Kubeconfig => {
                let (_, loaded) = Credentials::from_kubeconfig(path, &Default::default()).await?;
                let store = loaded.token_store().expect("an inline token").clone();
                credentials.push(loaded);
                store
            }
        };
        stores.push(store);
    }
    let load_s = load_start.elapsed().as_secs_f64();

    // Idle: nothing changes; what does the process spend?
    tokio::time::sleep(Duration::from_secs(1)).await;
    peak.pause(true);
    // Let the sampler park before the window opens.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (cpu0, wall0) = (cpu(), Instant::now());
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let idle_pct = 100.0 * (cpu() - cpu0).as_secs_f64() / wall0.elapsed().as_secs_f64();
    peak.pause(false);

    // Rotations, one at a time.
    let reads0 = total_reads(&stores);
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ n as u64);
    let mut latencies = Vec::with_capacity(args.rotations);
    let mut missed = 0;
    let cpu0 = cpu();
    for r in 1..=args.rotations {
        let i = rng.below(n);
        let token = format!("token-{i}-{r}");
        let want = format!("Bearer {token}");
        let store = &stores[i];
        let mut rx = store.subscribe();
        let renamed_at = rotate(&paths[i], &content(args.source, &ca_pem, &token))?;
        let seen = tokio::time::timeout(MISSED_AFTER, async {
            loop {
                if store.current().header_value() == want.as_str() {
                    return Instant::now();
                }
                rx.changed().await.expect("the store is alive");
            }
        })
        .await;
        match seen {
            Ok(at) => latencies.push(at.duration_since(renamed_at)),
            Err(_) => missed += 1,
        }
        tokio::time::sleep(BETWEEN).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu_ms = (cpu() - cpu0).as_secs_f64() * 1000.0 / args.rotations as f64;
    let reads = total_reads(&stores) - reads0;

    // An event for a whole directory (its attributes change): every store of it re-checks
    // its file, in one pass, a few reads at a time.
    let dir = paths[0].parent().expect("a directory");
    let members: Vec<&TokenStore> = stores
        .iter()
        .zip(&paths)
        .filter(|(_, p)| p.parent() == Some(dir))
        .map(|(s, _)| s)
        .collect();
    let before: u64 = members.iter().map(|s| s.status().reads).sum();
    let (cpu0, wall0) = (cpu(), Instant::now());
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))?;
    }
    let mut wake_all_reads = 0;
    while wall0.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        wake_all_reads = members.iter().map(|s| s.status().reads).sum::<u64>() - before;
        if wake_all_reads >= members.len() as u64 {
            break;
        }
    }
    let wake_all = (wall0.elapsed(), cpu() - cpu0);

    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };
    let layout_name = match layout {
        Layout::Dirs => "dirs",
        Layout::Onedir => "onedir",
    };
    let source_name = match args.source {
        Source::Token => "token",
        Source::Kubeconfig => "kubeconfig",
    };
    println!(
        "# n={n} layout={layout_name}: loaded in {load_s:.2} s; {} inotify watches on {} \
         inotify instances; missed {missed} of {} rotations",
        procfs::inotify_watches(),
        procfs::inotify_fds(),
        args.rotations
    );
    println!(
        "# n={n} layout={layout_name}: a directory-wide event re-read its {} files in {:.0} ms \
         ({:.0} ms of CPU, polling included; {wake_all_reads} reads)",
        members.len(),
        wake_all.0.as_secs_f64() * 1000.0,
        wake_all.1.as_secs_f64() * 1000.0,
    );
    println!(
        "scale n={n} layout={layout_name} source={source_name} reload_p50_ms={:.2} reload_p99_ms={:.2} \
         reads_per_rotation={:.2} cpu_ms_per_rotation={:.2} idle_cpu_pct={:.3} threads_peak={}",
        pct(0.50),
        pct(0.99),
        reads as f64 / args.rotations as f64,
        cpu_ms,
        idle_pct,
        peak.peak.load(Ordering::Relaxed),
    );

    drop(stores);
    drop(credentials);
    let start = Instant::now();
    while procfs::inotify_watches() > 0 && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
