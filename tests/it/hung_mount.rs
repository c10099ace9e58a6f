//! A token file on a mount that stops answering (a hung NFS or CSI volume) holds no
//! runtime thread, on a current-thread runtime and on a multi-thread one.
//!
//! The volume is a FUSE filesystem the test mounts itself (`support/fuse.rs`), laid out by
//! the kubelet's writer (`token -> ..data/token`), with a store on it whose watcher runs.
//! The kubelet's next rotation switches `..data`, and the mount hangs right after: every
//! request is held, so the reader woken by the switch finds the mount hung. Then, each
//! check with a deadline watched from outside the runtime (its answer comes over a channel
//! the test thread waits on, so that a stalled runtime fails the check rather than hanging
//! the test):
//! - no thread of the runtime waits on the mount (each request held names its thread,
//!   and the runtime's workers are known from their park hook);
//! - stores on a healthy directory still follow their rotations, and requests through
//!   another store's layer still flow;
//! - the hung store's `reload()` fails within its time limit with an error naming the
//!   path, keeps its last good token, and its status says so;
//! - a store loaded on a mount that hung before anything watched it fails within its time
//!   limit, naming the path, while the runtime goes on;
//! - kube's config loader (`kube::Credentials::from_kubeconfig`), reading a CA file on a
//!   hung mount, holds no worker either.
//!
//! At the end the mounts are released (every held request answered with `EIO`) and
//! unmounted. Where FUSE cannot be used (no `/dev/fuse`, the mount fails), the test says
//! so on its output and passes, unless `BEARER_RELOAD_REQUIRE_FUSE` is set (as `.ci/run`
//! does where `/dev/fuse` exists). Each test in a process of its own (`support::alone`):
//! it mounts filesystems and watches which threads wait on them, and the process's one
//! directory check can be held by a hung mount.

use crate::support;

#[cfg(target_os = "linux")]
#[path = "../support/fuse.rs"]
mod fuse;

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashSet;
    use std::fmt;
    use std::future::Future;
    use std::io::Write as _;
    use std::path::Path;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex, mpsc};
    use std::time::{Duration, Instant};

    use bearer_reload::source::FileSource;
    use bearer_reload::testing::ProjectedTokenDir;
    use bearer_reload::{BearerLayer, Status, TokenStore, WatchState};
    use http::{Request, Response, header::AUTHORIZATION};
    use tower::{Layer, ServiceExt, service_fn};

    use super::fuse::{HangingMount, Held};
    use super::support::{DEADLINE, chain};

    /// The hung stores' time limit.
    const LIMIT: Duration = Duration::from_millis(500);
    /// How long past its time limit a failed read may take to come back (a busy machine).
    const SLACK: Duration = Duration::from_secs(1);
    /// How long a check waits for the runtime's answer: longer than the deadlines the
    /// runtime's own waits have ([`DEADLINE`]), so that a wait that timed out says so.
    const WATCHDOG: Duration = Duration::from_secs(15);
    /// How long a check waits for the runtime once it has stalled on an earlier one.
    const AFTER_A_STALL: Duration = Duration::from_secs(2);
    /// Stores on healthy directories, beside the hung one.
    const OTHERS: usize = 3;

    /// The two tests share the process's one watcher registry: one at a time, so that
    /// what one sees is its own doing.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[derive(Debug, Clone, Copy)]
    pub(super) enum Flavor {
        CurrentThread,
        MultiThread,
    }

    impl fmt::Display for Flavor {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(match self {
                Flavor::CurrentThread => "current-thread runtime",
                Flavor::MultiThread => "multi-thread runtime (2 workers)",
            })
        }
    }

    type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

    /// The runtime under test, on a thread of its own: the test thread hands it work and
    /// waits for each answer with a deadline, so a runtime that stalls fails a check
    /// instead of hanging the test.
    struct Runtime {
        jobs: Option<tokio::sync::mpsc::UnboundedSender<Job>>,
        /// The kernel ids of its worker threads (those that park; the blocking pool's
        /// threads never do).
        workers: Arc<Mutex<HashSet<u32>>>,
        ended: mpsc::Receiver<()>,
    }

    impl Runtime {
        fn start(flavor: Flavor) -> Self {
            let workers = Arc::new(Mutex::new(HashSet::new()));
            let (jobs, mut next) = tokio::sync::mpsc::unbounded_channel::<Job>();
            let (end, ended) = mpsc::channel();
            let parked = workers.clone();
            std::thread::Builder::new()
                .name("rt-under-test".into())
                .spawn(move || {
                    let mut builder = match flavor {
                        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
                        Flavor::MultiThread => {
                            let mut builder = tokio::runtime::Builder::new_multi_thread();
                            builder.worker_threads(2);
                            builder
                        }
                    };
                    let runtime = builder
                        .enable_all()
                        .thread_name("rt-under-test")
                        .on_thread_park(move || {
                            let tid = rustix::thread::gettid().as_raw_nonzero().get();
                            let tid = u32::try_from(tid).unwrap_or_default();
                            parked.lock().unwrap().insert(tid);
                        })
                        .build()
                        .unwrap();
                    runtime.block_on(async move {
                        while let Some(job) = next.recv().await {
                            tokio::spawn(job);
                        }
                    });
                    runtime.shutdown_timeout(DEADLINE);
                    let _ = end.send(());
                })
                .unwrap();
            Self {
                jobs: Some(jobs),
                workers,
                ended,
            }
        }

        /// Starts `work` as a task on the runtime; its answer comes on the receiver.
        fn submit<T: Send + 'static>(
            &self,
            work: impl Future<Output = T> + Send + 'static,
        ) -> mpsc::Receiver<T> {
            let (answer, rx) = mpsc::channel();
            let job: Job = Box::pin(async move {
                let _ = answer.send(work.await);
            });
            let _ = self.jobs.as_ref().expect("running").send(job);
            rx
        }

        fn is_worker(&self, tid: u32) -> bool {
            self.workers.lock().unwrap().contains(&tid)
        }

        /// Ends the runtime (its tasks dropped); whether its thread ended in time.
        fn end(mut self) -> bool {
            drop(self.jobs.take());
            self.ended.recv_timeout(2 * DEADLINE).is_ok()
        }
    }

    /// What the test found, check by check.
    struct Report {
        flavor: Flavor,
        lines: Vec<String>,
        failures: usize,
        /// The first check the runtime did not answer in time.
        stalled: Option<String>,
    }

    impl Report {
        fn ok(&mut self, line: String) {
            self.lines.push(format!("  ok    {line}"));
        }

        fn fail(&mut self, line: String) {
            self.failures += 1;
            self.lines.push(format!("  FAIL  {line}"));
        }

        fn check(&mut self, passed: bool, line: String) {
            if passed {
                self.ok(line)
            } else {
                self.fail(line)
            }
        }

        /// Waits for the runtime's answer to `what`; on a stall, says which threads wait
        /// on the mounts at that moment.
        fn wait<T>(
            &mut self,
            runtime: &Runtime,
            mounts: &[&HangingMount],
            what: &str,
            answer: &mpsc::Receiver<T>,
        ) -> Option<T> {
            let deadline = if self.stalled.is_some() {
                AFTER_A_STALL
            } else {
                WATCHDOG
            };
            let started = Instant::now();
            match answer.recv_timeout(deadline) {
                Ok(value) => Some(value),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let waiting = describe(runtime, mounts.iter().flat_map(|m| m.held()));
                    self.fail(format!(
                        "{what}: the runtime did not answer within {:?} (stalled); \
                         threads waiting on the mount: {waiting}",
                        started.elapsed()
                    ));
                    self.stalled.get_or_insert_with(|| what.to_owned());
                    None
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.fail(format!("{what}: the task panicked (see its message above)"));
                    None
                }
            }
        }

        /// No request a runtime worker made is held.
        fn no_worker_waits(&mut self, runtime: &Runtime, when: &str, held: &[Held]) {
            let workers: Vec<&Held> = held.iter().filter(|h| runtime.is_worker(h.tid)).collect();
            self.check(
                workers.is_empty(),
                format!(
                    "{when}: no runtime worker waits on the hung mount (held: {})",
                    describe(runtime, held.iter().cloned())
                ),
            );
        }
    }

    fn describe(runtime: &Runtime, held: impl Iterator<Item = Held>) -> String {
        let held: Vec<String> = held
            .map(|h| {
                let whose = if runtime.is_worker(h.tid) {
                    "a RUNTIME WORKER"
                } else {
                    "not a runtime worker"
                };
                format!("[{h}: {whose}]")
            })
            .collect();
        if held.is_empty() {
            "none".into()
        } else {
            held.join(", ")
        }
    }

    /// Skips the test where FUSE cannot be used, saying why on the output (past the test
    /// harness's capture), unless FUSE is required.
    fn skip(why: &str) {
        if std::env::var_os("BEARER_RELOAD_REQUIRE_FUSE").is_some() {
            panic!("FUSE is required (BEARER_RELOAD_REQUIRE_FUSE) but cannot be used: {why}");
        }
        // One write, so that the harness's own lines do not land inside it.
        let line = format!("hung_mount: skipped, FUSE cannot be used here: {why}\n");
        let _ = std::io::stderr().write_all(line.as_bytes());
    }

    /// The kubelet's rotation up to its switch of `..data` (its steps 1 to 5): a new
    /// timestamped directory with the token, `..data_tmp` pointing there, renamed over
    /// `..data`. Its last step, removing the old directory, is left out: the mount hangs
    /// right after the switch.
    fn switch_to(volume: &Path, token: &str) {
        let ts = "..2026_12_07_00_00_00.000000002";
        std::fs::create_dir(volume.join(ts)).unwrap();
        std::fs::write(volume.join(ts).join("token"), token).unwrap();
        std::os::unix::fs::symlink(ts, volume.join("..data_tmp")).unwrap();
        std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).unwrap();
    }

    /// Waits until `store` carries `token`, woken by its rotations.
    async fn carries(store: &TokenStore, token: &str) -> Result<(), String> {
        let want = format!("Bearer {token}");
        let mut generations = store.subscribe();
        let waited = tokio::time::timeout(DEADLINE, async {
            loop {
                generations.borrow_and_update();
                if store.current().header_value() == want.as_str() {
                    return;
                }
                if generations.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        })
        .await;
        waited.map_err(|_| {
            format!(
                "{} never carried its new token; status {:?}",
                store.status().source,
                store.status()
            )
        })
    }

    /// Sends a request through a layer on `store`; the token it carried.
    async fn request(store: &TokenStore) -> String {
        let client =
            BearerLayer::new(store.clone()).layer(service_fn(|req: Request<()>| async move {
                let auth = req.headers()[AUTHORIZATION].to_str().unwrap().to_owned();
                Ok::<_, std::convert::Infallible>(Response::new(auth))
            }));
        client.oneshot(Request::new(())).await.unwrap().into_body()
    }

    /// Runs a writer's rotation on the blocking pool (a runtime shutting down cancels it).
    async fn rotate(
        writer: impl FnOnce() -> std::io::Result<Instant> + Send + 'static,
    ) -> Result<(), String> {
        match tokio::task::spawn_blocking(writer).await {
            Ok(written) => written.map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Rotates each healthy volume to `round` and waits for its store to follow; then
    /// 20 requests through a layer on each carry its new token.
    async fn others_go_on(
        others: Vec<(ProjectedTokenDir, TokenStore)>,
        round: u32,
    ) -> Result<(), String> {
        for (i, (volume, store)) in others.iter().enumerate() {
            let token = format!("other-{i}-{round}");
            let writer = volume.clone();
            let next = token.clone();
            rotate(move || writer.rotate(next)).await?;
            carries(store, &token).await?;
            for _ in 0..20 {
                let sent = request(store).await;
                if sent != format!("Bearer {token}") {
                    return Err(format!("a request carried {sent:?}, not {token:?}"));
                }
            }
        }
        Ok(())
    }

    /// The hung store's reload: its result (the error's chain) and how long it took.
    type Reloaded = (Result<String, String>, Duration);

    pub(super) fn a_hung_mount_holds_no_runtime_thread(flavor: Flavor) {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let tmp = tempfile::tempdir().unwrap();
        let mount_at = |name: &str| {
            let dir = tmp.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            HangingMount::mount(&dir)
        };
        let mounts = ["hung", "dead", "late", "kube"].map(mount_at);
        let [hung, dead, late, kube] = match mounts {
            [Ok(hung), Ok(dead), Ok(late), Ok(kube)] => [hung, dead, late, kube],
            [Err(why), ..] | [_, Err(why), ..] | [.., Err(why), _] | [.., Err(why)] => {
                return skip(&why);
            }
        };
        // The kubelet lays out the volumes while they answer; `dead` hangs before any
        // store looks at it, `late` once a store has read it.
        let volume = ProjectedTokenDir::create(hung.path(), "hung-1").unwrap();
        let hung_path = volume.token_path();
        let dead_path = ProjectedTokenDir::create(dead.path(), "dead-1")
            .unwrap()
            .token_path();
        dead.hang();
        let late_path = ProjectedTokenDir::create(late.path(), "late-1")
            .unwrap()
            .token_path();
        let others: Vec<ProjectedTokenDir> = (0..OTHERS)
            .map(|i| {
                ProjectedTokenDir::create(
                    tmp.path().join(format!("sa-{i}")),
                    format!("other-{i}-1"),
                )
                .unwrap()
            })
            .collect();

        let runtime = Runtime::start(flavor);
        let mut report = Report {
            flavor,
            lines: Vec::new(),
            failures: 0,
            stalled: None,
        };
        let mounts = [&hung, &dead, &late, &kube];

        // 1. The stores, loaded while the mount answers: the hung one with its watcher on.
        let path = hung_path.clone();
        let volumes = others.clone();
        let loaded = runtime.submit(async move {
            let store = TokenStore::builder(FileSource::new(&path))
                .fetch_timeout(LIMIT)
                .load()
                .await
                .map_err(|e| chain(&e))?;
            let mut others = Vec::new();
            for volume in volumes {
                let other = TokenStore::builder(FileSource::new(volume.token_path()))
                    .load()
                    .await
                    .map_err(|e| chain(&e))?;
                others.push((volume, other));
            }
            Ok::<_, String>((store, others))
        });
        let (store, others) = match report.wait(&runtime, &mounts, "loading the stores", &loaded) {
            Some(Ok(stores)) => stores,
            Some(Err(e)) => panic!("{flavor}: loading the stores before the hang failed: {e}"),
            None => panic!(
                "{flavor}: loading the stores before the hang stalled:\n{}",
                report.lines.join("\n")
            ),
        };
        assert_eq!(store.current().header_value(), "Bearer hung-1");
        // Its watch may be set up in the background: the rotation's event must find it.
        let watched = store.clone();
        let watching = runtime.submit(async move {
            let start = Instant::now();
            while watched.status().watch != WatchState::Active {
                if start.elapsed() > DEADLINE {
                    return Err(format!("watch state {:?}", watched.status().watch));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(())
        });
        match report.wait(&runtime, &mounts, "the hung store watches", &watching) {
            Some(Ok(())) => {}
            Some(Err(e)) => panic!("{flavor}: the hung store never watched its volume: {e}"),
            None => panic!(
                "{flavor}: stalled before the hang:\n{}",
                report.lines.join("\n")
            ),
        }

        // 2. The kubelet's next rotation, and the mount hangs right after its switch.
        hung.hang_after("rename");
        switch_to(hung.path(), "hung-2");
        assert!(hung.hanging(), "the switch of ..data hung the mount");
        match hung.wait_until_held(DEADLINE) {
            Some(held) => {
                report.ok(format!(
                    "the rotation woke the hung store, which went to its mount: {}",
                    describe(&runtime, held.iter().cloned())
                ));
                report.no_worker_waits(&runtime, "after the rotation's event", &held);
            }
            None => report.fail(format!(
                "no request reached the hung mount within {DEADLINE:?} of the rotation: the \
                 hung store's watcher never read its file again"
            )),
        }

        // 3. Stores on healthy directories follow their rotations; requests flow.
        let answer = runtime.submit(others_go_on(others.clone(), 2));
        if let Some(result) = report.wait(
            &runtime,
            &mounts,
            "other stores follow their rotations",
            &answer,
        ) {
            report.check(
                result.is_ok(),
                format!(
                    "{OTHERS} other stores followed their rotations, and requests through \
                     their layers carried the new tokens: {result:?}"
                ),
            );
        }

        // 4. The hung store's reloads fail within its time limit, naming the path; it
        // keeps its last good token, and says so.
        let hung_store = store.clone();
        let answer = runtime.submit(async move {
            let mut reloads: Vec<Reloaded> = Vec::new();
            for _ in 0..2 {
                let started = Instant::now();
                let result = hung_store.reload().await;
                let result = result.map(|t| t.to_string()).map_err(|e| chain(&e));
                reloads.push((result, started.elapsed()));
            }
            let status: Status = hung_store.status();
            let kept = hung_store.current().header_value() == "Bearer hung-1";
            (reloads, kept, status)
        });
        if let Some((reloads, kept, status)) =
            report.wait(&runtime, &mounts, "the hung store's reload()", &answer)
        {
            check_failed_reads(
                &mut report,
                "the hung store's reload()",
                &hung_path,
                &reloads,
            );
            report.check(kept, "the hung store keeps its last good token".into());
            let said = status.last_error.as_ref().map(|e| chain(e));
            let names_path = said
                .as_deref()
                .is_some_and(|e| e.contains(&hung_path.display().to_string()));
            report.check(
                names_path && status.failures > 0,
                format!(
                    "its status says the reads fail, naming the path (last_error {said:?}, \
                     failures {}, watch {:?})",
                    status.failures, status.watch
                ),
            );
        }

        // 5. A store loaded on a mount that hung before anything looked at it fails within
        // its time limit, naming the path, while the runtime goes on.
        let path = dead_path.clone();
        let loading = runtime.submit(async move {
            let started = Instant::now();
            let result = TokenStore::builder(FileSource::new(&path))
                .fetch_timeout(LIMIT)
                .load()
                .await;
            let result = result
                .map(|s| s.current().to_string())
                .map_err(|e| chain(&e));
            (result, started.elapsed())
        });
        let meanwhile = runtime.submit(others_go_on(others.clone(), 3));
        if let Some(loaded) = report.wait(&runtime, &mounts, "load() on a hung mount", &loading) {
            check_failed_reads(
                &mut report,
                "load() on a mount already hung",
                &dead_path,
                &[loaded],
            );
        }
        if let Some(result) = report.wait(
            &runtime,
            &mounts,
            "other stores, while a load() hangs",
            &meanwhile,
        ) {
            report.check(
                result.is_ok(),
                format!(
                    "meanwhile the other stores followed their rotations and requests \
                     flowed: {result:?}"
                ),
            );
        }

        // 6. kube's loader, reading a kubeconfig whose CA file is on a hung mount, holds a
        // thread of the blocking pool, not a worker; the other stores go on meanwhile.
        #[cfg(feature = "kube")]
        kube_loader_on_a_hung_mount(&mut report, &runtime, &mounts, tmp.path(), &others);

        // 7. A store whose mount hangs right after its first read (the file closed): its
        // load() comes back within its time limit, and if it fails, it names the path;
        // meanwhile a store loaded on a healthy directory follows its rotation, and the
        // others go on.
        late.hang_after("flush");
        let path = late_path.clone();
        let loading = runtime.submit(async move {
            let started = Instant::now();
            let result = TokenStore::builder(FileSource::new(&path))
                .fetch_timeout(LIMIT)
                .load()
                .await;
            let took = started.elapsed();
            (result.map_err(|e| chain(&e)), took)
        });
        let fresh = ProjectedTokenDir::create(tmp.path().join("fresh"), "fresh-1").unwrap();
        let meanwhile = runtime.submit(async move {
            let store = TokenStore::builder(FileSource::new(fresh.token_path()))
                .load()
                .await
                .map_err(|e| chain(&e))?;
            let writer = fresh.clone();
            rotate(move || writer.rotate("fresh-2")).await?;
            carries(&store, "fresh-2").await
        });
        let others_meanwhile = runtime.submit(others_go_on(others.clone(), 5));
        if let Some((result, took)) = report.wait(
            &runtime,
            &mounts,
            "load() on a mount that hangs after its read",
            &loading,
        ) {
            let path = late_path.display().to_string();
            let (store, said) = match result {
                Ok(store) => (Some(store), "succeeded".to_owned()),
                Err(e) => (None, e),
            };
            report.check(
                took <= LIMIT + SLACK && (store.is_some() || said.contains(&path)),
                format!(
                    "load() on a mount that hangs right after its read came back after \
                     {took:?} (limit {LIMIT:?}): {said:?}"
                ),
            );
            drop(store);
            report.check(
                late.hanging(),
                "the late mount hung after the store's read".into(),
            );
        }
        if let Some(result) = report.wait(
            &runtime,
            &mounts,
            "a store loaded meanwhile on a healthy directory",
            &meanwhile,
        ) {
            report.check(
                result.is_ok(),
                format!(
                    "meanwhile a store loaded on a healthy directory followed its \
                     rotation: {result:?}"
                ),
            );
        }
        if let Some(result) = report.wait(
            &runtime,
            &mounts,
            "other stores, while the late mount hangs",
            &others_meanwhile,
        ) {
            report.check(
                result.is_ok(),
                format!("and the other stores followed theirs, requests flowing: {result:?}"),
            );
        }

        // 8. At the end, still no runtime worker waits on a hung mount.
        let held: Vec<Held> = mounts.iter().flat_map(|m| m.held()).collect();
        report.no_worker_waits(&runtime, "at the end", &held);

        // Every held request answered with EIO, the stores dropped, the runtime ended,
        // the mounts unmounted.
        for mount in mounts {
            mount.release();
        }
        drop((store, others));
        if !runtime.end() {
            report.fail("the runtime's thread did not end once the mounts were released".into());
        }
        drop((hung, dead, late, kube));

        let text = format!("{flavor}:\n{}", report.lines.join("\n"));
        if report.failures == 0 {
            eprintln!("{text}");
        }
        assert_eq!(
            report.failures, 0,
            "{} check(s) failed on the {}; first stall: {:?}\n{text}",
            report.failures, report.flavor, report.stalled
        );
    }

    /// `Credentials::from_kubeconfig` on a kubeconfig whose CA file is on the hung mount
    /// `mounts[3]` (only kube's own loader reads that file): no worker waits on it, and the
    /// other stores follow their rotations meanwhile.
    #[cfg(feature = "kube")]
    fn kube_loader_on_a_hung_mount(
        report: &mut Report,
        runtime: &Runtime,
        mounts: &[&HangingMount],
        dir: &Path,
        others: &[(ProjectedTokenDir, TokenStore)],
    ) {
        let mount = mounts[3];
        let ca = mount.path().join("ca.crt");
        std::fs::write(&ca, "read by kube once the mount hangs").unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
                 clusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n    \
                 certificate-authority: {}\n\
                 users:\n- name: u\n  user:\n    token: abc\n\
                 contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n",
                ca.display()
            ),
        )
        .unwrap();
        mount.hang();
        let _loading = runtime.submit(async move {
            let options = kube::config::KubeConfigOptions::default();
            bearer_reload::kube::Credentials::from_kubeconfig(&kubeconfig, &options)
                .await
                .map(drop)
        });
        // The file's own write may leave a release held; the loader's is a lookup of it.
        match mount.wait_until_held_such(DEADLINE, |h| h.what.contains("\"ca.crt\"")) {
            Some(held) => report.no_worker_waits(runtime, "kube's loader on a hung CA file", &held),
            None => report.fail(format!(
                "from_kubeconfig never read its CA file on the hung mount within {DEADLINE:?}"
            )),
        }
        let meanwhile = runtime.submit(others_go_on(others.to_vec(), 4));
        if let Some(result) = report.wait(
            runtime,
            mounts,
            "other stores, while kube's loader hangs",
            &meanwhile,
        ) {
            report.check(
                result.is_ok(),
                format!("meanwhile the other stores followed their rotations: {result:?}"),
            );
        }
    }

    /// Each read failed within the time limit, with an error naming `path`.
    fn check_failed_reads(report: &mut Report, what: &str, path: &Path, reads: &[Reloaded]) {
        let path = path.display().to_string();
        for (i, (result, took)) in reads.iter().enumerate() {
            let within = *took <= LIMIT + SLACK;
            match result {
                Err(e) => report.check(
                    within && e.contains(&path),
                    format!(
                        "{what} #{}: failed after {took:?} (limit {LIMIT:?}) with {e:?}",
                        i + 1
                    ),
                ),
                Ok(token) => report.fail(format!(
                    "{what} #{}: succeeded after {took:?} with {token:?} on a hung mount",
                    i + 1
                )),
            }
        }
    }
}

#[test]
fn on_a_current_thread_runtime_a_hung_mount_holds_no_runtime_thread() {
    if !support::alone::in_own_process(
        module_path!(),
        "on_a_current_thread_runtime_a_hung_mount_holds_no_runtime_thread",
    ) {
        return;
    }
    #[cfg(target_os = "linux")]
    linux::a_hung_mount_holds_no_runtime_thread(linux::Flavor::CurrentThread);
    #[cfg(not(target_os = "linux"))]
    eprintln!("hung_mount: skipped, the FUSE test runs on Linux only");
}

#[test]
fn on_a_multi_thread_runtime_a_hung_mount_holds_no_runtime_thread() {
    if !support::alone::in_own_process(
        module_path!(),
        "on_a_multi_thread_runtime_a_hung_mount_holds_no_runtime_thread",
    ) {
        return;
    }
    #[cfg(target_os = "linux")]
    linux::a_hung_mount_holds_no_runtime_thread(linux::Flavor::MultiThread);
    #[cfg(not(target_os = "linux"))]
    eprintln!("hung_mount: skipped, the FUSE test runs on Linux only");
}
