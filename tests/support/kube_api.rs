//! A local HTTPS server that answers a small part of the Kubernetes API with real Kubernetes
//! JSON, and accepts only the bearer tokens it is told to accept.
//!
//! - TLS on 127.0.0.1 with a CA and a server certificate (for `127.0.0.1` and `localhost`)
//!   made at start with rcgen; [`KubeApi::ca_pem`] and [`KubeApi::kubeconfig`] hand the CA
//!   to clients.
//! - `GET /api/v1/namespaces/{ns}/configmaps` (a `ConfigMapList`),
//!   `GET /api/v1/namespaces/{ns}/configmaps/{name}`,
//!   `POST /api/v1/namespaces/{ns}/configmaps` (stored; `409 AlreadyExists` for a name that
//!   exists), `GET /api/v1/namespaces/{ns}/pods/{name}` (pods added with
//!   [`KubeApi::add_pod`]); a `404 NotFound` `Status` for anything else.
//! - A `401 Unauthorized` `Status` for a request whose bearer token is not accepted. Whether
//!   a token is accepted is one function ([`KubeApi::accept_with`]), so that a verifier of
//!   signed tokens can be plugged in.
//! - Every request is recorded ([`Seen`]): its token, impersonation headers and namespace.
//!
//! Built on `serve.rs` and `tls.rs` beside it (`super::serve`, `super::tls`), so that
//! examples can include the three with `#[path = "../tests/support/..."]`.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// Decides whether a bearer token is accepted.
pub type Verifier = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// An extra route ([`KubeApi::route`]): given an accepted request's parts and body, its
/// response, or `None` to leave the request to the routes before it and the built-in ones.
pub type Route = Arc<
    dyn Fn(
            &http::request::Parts,
            &Bytes,
        ) -> Option<std::pin::Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send>>>
        + Send
        + Sync,
>;

/// One request, as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    /// The `{ns}` of a namespaced path.
    pub namespace: Option<String>,
    /// The bearer token, if the request had one.
    pub token: Option<String>,
    pub accepted: bool,
    /// `Impersonate-User`.
    pub impersonate_user: Option<String>,
    /// Every `Impersonate-Group`, in order.
    pub impersonate_groups: Vec<String>,
    /// When the request arrived.
    pub at: std::time::Instant,
}

/// A kubeconfig user entry, for [`KubeApi::kubeconfig_for`].
#[derive(Clone, Debug, Default)]
pub struct User<'a> {
    /// `tokenFile`.
    pub token_file: Option<&'a Path>,
    /// `token` (inline).
    pub token: Option<&'a str>,
    /// `as`.
    pub impersonate: Option<&'a str>,
    /// `as-groups`.
    pub impersonate_groups: &'a [&'a str],
    /// `exec`: a credential plugin.
    pub exec: Option<ExecUser<'a>>,
}

/// A kubeconfig user's `exec` section, for [`User::exec`].
#[derive(Clone, Copy, Debug)]
pub struct ExecUser<'a> {
    /// `apiVersion`.
    pub api_version: &'a str,
    /// `command`.
    pub command: &'a Path,
    /// `installHint`.
    pub install_hint: &'a str,
}

#[derive(Default)]
struct Objects {
    /// (namespace, name) -> object.
    configmaps: BTreeMap<(String, String), Value>,
    pods: BTreeMap<(String, String), Value>,
}

struct State {
    accept: Mutex<Verifier>,
    seen: Mutex<Vec<Seen>>,
    objects: Mutex<Objects>,
    /// Accepted requests answered with this status before being served: (count, status).
    fail_next: Mutex<(u32, StatusCode)>,
    resource_version: AtomicU64,
    requests: watch::Sender<u64>,
    routes: Mutex<Vec<Route>>,
}

/// The server. Stops accepting when dropped.
pub struct KubeApi {
    addr: SocketAddr,
    ca_pem: String,
    state: Arc<State>,
    files: tempfile::TempDir,
    kubeconfigs: AtomicU64,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a server on 127.0.0.1 that accepts no token until told.
pub async fn start() -> KubeApi {
    KubeApi::start().await
}

impl KubeApi {
    /// Starts a server on 127.0.0.1 that accepts no token until told (with a process-wide
    /// rustls provider for the kube clients of the test: [`super::tls::install_ring`]).
    pub async fn start() -> Self {
        super::tls::install_ring();
        let (ca_pem, tls) = certificates();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            accept: Mutex::new(Arc::new(|_: &str| false)),
            seen: Mutex::new(Vec::new()),
            objects: Mutex::new(Objects::default()),
            fail_next: Mutex::new((0, StatusCode::SERVICE_UNAVAILABLE)),
            resource_version: AtomicU64::new(1000),
            requests: watch::Sender::new(0),
            routes: Mutex::new(Vec::new()),
        });
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let task = super::serve::spawn(listener, Some(acceptor), {
            let state = state.clone();
            move |req| {
                let state = state.clone();
                async move { handle(&state, req).await }
            }
        });
        Self {
            addr,
            ca_pem,
            state,
            files: tempfile::tempdir().unwrap(),
            kubeconfigs: AtomicU64::new(0),
            task,
        }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The PEM of the CA that signed the server's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Accept `token` from now on, and no other.
    pub fn accept_only(&self, token: &str) {
        let token = token.to_owned();
        self.accept_with(move |t| t == token);
    }

    /// Accept `token` too, along with whatever was accepted before.
    pub fn accept_also(&self, token: &str) {
        let token = token.to_owned();
        let before = self.state.accept.lock().unwrap().clone();
        self.accept_with(move |t| t == token || before(t));
    }

    /// Accept the tokens for which `verify` says yes (e.g. a JWT verifier).
    pub fn accept_with(&self, verify: impl Fn(&str) -> bool + Send + Sync + 'static) {
        *self.state.accept.lock().unwrap() = Arc::new(verify);
    }

    /// Serves more of the API: `route` sees every accepted request first (e.g. TokenRequest,
    /// `token_request.rs`).
    pub fn route(&self, route: Route) {
        self.state.routes.lock().unwrap().push(route);
    }

    /// Answer the next `n` accepted requests with `status` (e.g. 503, which kube retries).
    pub fn fail_next(&self, n: u32, status: StatusCode) {
        *self.state.fail_next.lock().unwrap() = (n, status);
    }

    /// Adds a running pod that `GET .../pods/{name}` returns.
    pub fn add_pod(&self, namespace: &str, name: &str) {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self.new_metadata(namespace, name, json!({"app": name})),
            "spec": {
                "serviceAccountName": "default",
                "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
            },
            "status": {"phase": "Running", "podIP": "10.244.0.7"},
        });
        let key = (namespace.to_owned(), name.to_owned());
        self.state.objects.lock().unwrap().pods.insert(key, pod);
    }

    /// The stored config map, if any.
    pub fn configmap(&self, namespace: &str, name: &str) -> Option<Value> {
        let key = (namespace.to_owned(), name.to_owned());
        self.state
            .objects
            .lock()
            .unwrap()
            .configmaps
            .get(&key)
            .cloned()
    }

    /// Every request so far, in order of arrival.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// The bearer token of every request so far ("" for none), in order of arrival.
    pub fn tokens(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .map(|s| s.token.unwrap_or_default())
            .collect()
    }

    /// Requests refused with 401 so far.
    pub fn refused(&self) -> usize {
        self.seen().iter().filter(|s| !s.accepted).count()
    }

    pub fn requests(&self) -> u64 {
        *self.state.requests.borrow()
    }

    /// Waits, with a deadline, until the server has received `n` requests in all.
    pub async fn wait_requests(&self, n: u64, deadline: Duration) {
        super::serve::wait_requests(&self.state.requests, n, deadline).await;
    }

    /// A kubeconfig for this server: the cluster with `certificate-authority-data`, a user
    /// `user`, and a current context with `namespace`.
    pub fn kubeconfig_yaml(&self, user: &User<'_>, namespace: &str) -> String {
        let q = |s: &str| serde_json::to_string(s).unwrap();
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let mut entry = String::new();
        if let Some(path) = user.token_file {
            entry += &format!("    tokenFile: {}\n", q(&path.to_string_lossy()));
        }
        if let Some(token) = user.token {
            entry += &format!("    token: {}\n", q(token));
        }
        if let Some(name) = user.impersonate {
            entry += &format!("    as: {}\n", q(name));
        }
        if !user.impersonate_groups.is_empty() {
            entry += "    as-groups:\n";
            for group in user.impersonate_groups {
                entry += &format!("    - {}\n", q(group));
            }
        }
        if let Some(exec) = &user.exec {
            entry += &format!(
                "    exec:\n      apiVersion: {}\n      command: {}\n      \
                 interactiveMode: Never\n      installHint: {}\n",
                q(exec.api_version),
                q(&exec.command.to_string_lossy()),
                q(exec.install_hint),
            );
        }
        if entry.is_empty() {
            entry = "    {}\n".to_owned();
        }
        format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: test\n  \
               cluster:\n    \
                 server: {server}\n    \
                 certificate-authority-data: {ca}\n\
             users:\n\
             - name: test\n  \
               user:\n\
             {entry}\
             contexts:\n\
             - name: test\n  \
               context:\n    \
                 cluster: test\n    \
                 user: test\n    \
                 namespace: {namespace}\n\
             current-context: test\n",
            server = q(&self.url()),
            namespace = q(namespace),
        )
    }

    /// Writes a kubeconfig whose user reads its token from `token_file`; returns its path.
    pub fn kubeconfig(&self, token_file: &Path, namespace: &str) -> PathBuf {
        let user = User {
            token_file: Some(token_file),
            ..User::default()
        };
        self.kubeconfig_for(&user, namespace)
    }

    /// Writes a kubeconfig for `user` (see [`KubeApi::kubeconfig_yaml`]); returns its path.
    pub fn kubeconfig_for(&self, user: &User<'_>, namespace: &str) -> PathBuf {
        let n = self.kubeconfigs.fetch_add(1, Ordering::Relaxed);
        let path = self.files.path().join(format!("kubeconfig-{n}.yaml"));
        std::fs::write(&path, self.kubeconfig_yaml(user, namespace)).unwrap();
        path
    }

    fn new_metadata(&self, namespace: &str, name: &str, labels: Value) -> Value {
        new_metadata(&self.state, namespace, name, labels)
    }
}

fn new_metadata(state: &State, namespace: &str, name: &str, labels: Value) -> Value {
    let rv = state.resource_version.fetch_add(1, Ordering::SeqCst) + 1;
    let mut meta = json!({
        "name": name,
        "namespace": namespace,
        "uid": uid(rv),
        "resourceVersion": rv.to_string(),
        "creationTimestamp": rfc3339(SystemTime::now()),
    });
    if !labels.is_null() {
        meta["labels"] = labels;
    }
    meta
}

/// A CA, and a server certificate it signed for 127.0.0.1 and localhost: (CA PEM, config).
fn certificates() -> (String, rustls::ServerConfig) {
    let ca = super::tls::TestCa::new();
    (ca.ca_pem().to_owned(), ca.server_config())
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    Some(value.strip_prefix("Bearer ")?.to_owned())
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let namespace = match segments.as_slice() {
        ["api", "v1", "namespaces", ns, _, ..] => Some((*ns).to_owned()),
        _ => None,
    };
    let token = bearer(&parts.headers);
    let verify = state.accept.lock().unwrap().clone();
    let accepted = token.as_deref().is_some_and(|t| verify(t));
    let header_strings = |name: &str| {
        parts
            .headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    state.seen.lock().unwrap().push(Seen {
        method: parts.method.clone(),
        path: path.clone(),
        namespace: namespace.clone(),
        token,
        accepted,
        impersonate_user: header_strings("impersonate-user").into_iter().next(),
        impersonate_groups: header_strings("impersonate-group"),
        at: std::time::Instant::now(),
    });
    let body = body.collect().await.map(|b| b.to_bytes());
    state.requests.send_modify(|n| *n += 1);

    if !accepted {
        return status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized",
            None,
        );
    }
    {
        let mut fail = state.fail_next.lock().unwrap();
        if fail.0 > 0 {
            fail.0 -= 1;
            let code = fail.1;
            let reason = code
                .canonical_reason()
                .unwrap_or("Failure")
                .replace(' ', "");
            return status(
                code,
                "the server is currently unable to handle the request",
                &reason,
                None,
            );
        }
    }
    let Ok(body) = body else {
        return status(
            StatusCode::BAD_REQUEST,
            "unreadable body",
            "BadRequest",
            None,
        );
    };
    let routes = state.routes.lock().unwrap().clone();
    if let Some(response) = routes.iter().find_map(|route| route(&parts, &body)) {
        return response.await;
    }
    match (&parts.method, segments.as_slice()) {
        (&Method::GET, ["api", "v1", "namespaces", ns, "configmaps"]) => list_configmaps(state, ns),
        (&Method::POST, ["api", "v1", "namespaces", ns, "configmaps"]) => {
            create_configmap(state, ns, &body)
        }
        (&Method::GET, ["api", "v1", "namespaces", ns, "configmaps", name]) => {
            let key = ((*ns).to_owned(), (*name).to_owned());
            match state.objects.lock().unwrap().configmaps.get(&key) {
                Some(cm) => ok(StatusCode::OK, cm),
                None => not_found("configmaps", name),
            }
        }
        (&Method::GET, ["api", "v1", "namespaces", ns, "pods", name]) => {
            let key = ((*ns).to_owned(), (*name).to_owned());
            match state.objects.lock().unwrap().pods.get(&key) {
                Some(pod) => ok(StatusCode::OK, pod),
                None => not_found("pods", name),
            }
        }
        _ => status(
            StatusCode::NOT_FOUND,
            "the server could not find the requested resource",
            "NotFound",
            None,
        ),
    }
}

fn list_configmaps(state: &State, ns: &str) -> Response<Full<Bytes>> {
    let objects = state.objects.lock().unwrap();
    let items: Vec<Value> = objects
        .configmaps
        .iter()
        .filter(|((n, _), _)| n == ns)
        .map(|(_, cm)| {
            // A list's items carry no apiVersion and kind, as the API server sends them.
            let mut item = cm.clone();
            if let Some(obj) = item.as_object_mut() {
                obj.remove("apiVersion");
                obj.remove("kind");
            }
            item
        })
        .collect();
    let rv = state.resource_version.load(Ordering::SeqCst);
    ok(
        StatusCode::OK,
        &json!({
            "apiVersion": "v1",
            "kind": "ConfigMapList",
            "metadata": {"resourceVersion": rv.to_string()},
            "items": items,
        }),
    )
}

fn create_configmap(state: &State, ns: &str, body: &[u8]) -> Response<Full<Bytes>> {
    let Ok(Value::Object(mut cm)) = serde_json::from_slice::<Value>(body) else {
        let msg = "the body of the request was in an unknown format";
        return status(StatusCode::BAD_REQUEST, msg, "BadRequest", None);
    };
    if cm.get("kind").is_some_and(|k| k != "ConfigMap") {
        let msg = "the kind of the provided object does not match the resource";
        return status(StatusCode::BAD_REQUEST, msg, "BadRequest", None);
    }
    let meta = cm.get("metadata").cloned().unwrap_or(json!({}));
    if meta
        .get("namespace")
        .and_then(Value::as_str)
        .is_some_and(|n| n != ns)
    {
        let msg =
            "the namespace of the provided object does not match the namespace sent on the request";
        return status(StatusCode::BAD_REQUEST, msg, "BadRequest", None);
    }
    let Some(name) = meta.get("name").and_then(Value::as_str).map(str::to_owned) else {
        let msg = "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required";
        return status(StatusCode::UNPROCESSABLE_ENTITY, msg, "Invalid", None);
    };
    let mut objects = state.objects.lock().unwrap();
    let key = (ns.to_owned(), name.clone());
    if objects.configmaps.contains_key(&key) {
        let msg = format!("configmaps \"{name}\" already exists");
        let details = json!({"name": name, "kind": "configmaps"});
        return status(StatusCode::CONFLICT, &msg, "AlreadyExists", Some(details));
    }
    let mut new_meta = new_metadata(state, ns, &name, Value::Null);
    if let (Some(given), Some(new)) = (meta.as_object(), new_meta.as_object_mut()) {
        for (k, v) in given {
            new.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    cm.insert("apiVersion".into(), json!("v1"));
    cm.insert("kind".into(), json!("ConfigMap"));
    cm.insert("metadata".into(), new_meta);
    let cm = Value::Object(cm);
    objects.configmaps.insert(key, cm.clone());
    ok(StatusCode::CREATED, &cm)
}

pub fn ok(code: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap()
}

fn not_found(kind: &str, name: &str) -> Response<Full<Bytes>> {
    let msg = format!("{kind} \"{name}\" not found");
    let details = json!({"name": name, "kind": kind});
    status(StatusCode::NOT_FOUND, &msg, "NotFound", Some(details))
}

/// A Kubernetes `Status` object.
pub fn status(
    code: StatusCode,
    message: &str,
    reason: &str,
    details: Option<Value>,
) -> Response<Full<Bytes>> {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(details) = details {
        body["details"] = details;
    }
    ok(code, &body)
}

fn uid(n: u64) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("{nanos:08x}-{:04x}-4000-8000-{n:012x}", n & 0xffff)
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as Kubernetes writes timestamps.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
