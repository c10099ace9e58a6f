//! The TokenRequest API on the test API server ([`TokenApi`]), and a service that accepts
//! only unexpired tokens for its audience ([`AudienceService`]).
//!
//! - `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`, as kube-apiserver
//!   answers it: `spec.audiences` (default: the API server's), `spec.expirationSeconds`
//!   (default 3600; below 600 a `422 Invalid`), `spec.boundObjectRef`; a `201` TokenRequest
//!   whose `status.token` is an HS256-signed service-account JWT with the asked audience and
//!   expiry, and whose `status.expirationTimestamp` is now plus the TTL. `404 NotFound` for
//!   a service account never added; `403 Forbidden` for a requester told so.
//! - Every call is recorded ([`Call`]) and counted; the API can fail with a given status or
//!   stall ([`Mode`]) on demand; tokens can be revoked one by one, or all of a service
//!   account by deleting and creating it again (a new uid, as in kubernetes#132802).
//! - Time is a clock given at start: the system's, or a test's simulated one.
//!
//! Self-contained with `kube_api.rs` and `serve.rs`, so that examples can include it with
//! `#[path = "../tests/support/token_request.rs"] mod token_request;`.
#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Value, json};
use sha2::Digest;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::kube_api::{self, KubeApi};

/// The API server's own audience and issuer.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The wall clock the API reads.
pub type Now = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// How the API answers TokenRequests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Mints tokens.
    Serve,
    /// Answers every TokenRequest with this status (an outage: 503, 500, 429 ...).
    Fail(StatusCode),
    /// Holds every TokenRequest unanswered until the mode changes.
    Stall,
}

/// What became of one TokenRequest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Minted {
        jti: String,
        iat: SystemTime,
        exp: SystemTime,
    },
    Refused(StatusCode),
    /// Held by [`Mode::Stall`] (and answered, if ever, after the client gave up).
    Stalled,
}

/// One TokenRequest, as the API saw it.
#[derive(Clone, Debug)]
pub struct Call {
    /// When it arrived (on the API's clock).
    pub at: SystemTime,
    pub namespace: String,
    pub name: String,
    pub audiences: Vec<String>,
    pub expiration_seconds: u64,
    pub bound: Option<Value>,
    /// The bearer token the request was made with: who asked.
    pub requester: Option<String>,
    pub outcome: Outcome,
}

/// Why a token was refused by [`TokenApi::verify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a token this API signed.
    Invalid,
    WrongAudience,
    Expired,
    /// Revoked, or its service account was deleted (and maybe created again).
    Revoked,
}

struct State {
    key: [u8; 32],
    now: Now,
    /// (namespace, name) -> uid.
    accounts: Mutex<HashMap<(String, String), String>>,
    /// Requester tokens that may not create tokens.
    forbidden: Mutex<HashSet<String>>,
    mode: watch::Sender<Mode>,
    calls: Mutex<Vec<Call>>,
    /// TokenRequests received.
    received: watch::Sender<u64>,
    serial: AtomicU64,
    revoked: Mutex<HashSet<String>>,
}

/// The TokenRequest API of a [`KubeApi`].
#[derive(Clone)]
pub struct TokenApi {
    state: Arc<State>,
}

impl TokenApi {
    /// Adds TokenRequest to `api`, on the clock `now`.
    pub fn install(api: &KubeApi, now: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        // A per-run HS256 key: uniqueness, not secrecy, is what the tests need.
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let key: [u8; 32] = sha2::Sha256::digest(seed.as_nanos().to_le_bytes()).into();
        let state = Arc::new(State {
            key,
            now: Arc::new(now),
            accounts: Mutex::default(),
            forbidden: Mutex::default(),
            mode: watch::Sender::new(Mode::Serve),
            calls: Mutex::default(),
            received: watch::Sender::new(0),
            serial: AtomicU64::new(0),
            revoked: Mutex::default(),
        });
        let route = {
            let state = state.clone();
            Arc::new(move |parts: &http::request::Parts, body: &Bytes| {
                let path = parts.uri.path().to_owned();
                let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
                let [
                    "api",
                    "v1",
                    "namespaces",
                    ns,
                    "serviceaccounts",
                    name,
                    "token",
                ] = segments.as_slice()
                else {
                    return None;
                };
                if parts.method != Method::POST {
                    return None;
                }
                let requester = bearer(&parts.headers);
                let (state, ns, name, body) = (
                    state.clone(),
                    (*ns).to_owned(),
                    (*name).to_owned(),
                    body.clone(),
                );
                let answer: std::pin::Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(
                    async move { token_request(&state, requester, &ns, &name, &body).await },
                );
                Some(answer)
            })
        };
        api.route(route);
        Self { state }
    }

    /// Creates the service account `namespace/name` (a new uid); returns the uid. Creating
    /// it again (after a deletion) revokes every token of the old one.
    pub fn add_service_account(&self, namespace: &str, name: &str) -> String {
        let n = self.state.serial.fetch_add(1, Ordering::SeqCst);
        let uid = format!("5a0c{n:04x}-7d2e-4c1b-9f3a-{n:012x}");
        let key = (namespace.to_owned(), name.to_owned());
        self.state.accounts.lock().unwrap().insert(key, uid.clone());
        uid
    }

    /// Deletes and creates `namespace/name` again: the old account's tokens are refused.
    pub fn recreate_service_account(&self, namespace: &str, name: &str) -> String {
        self.add_service_account(namespace, name)
    }

    /// Refuses TokenRequests made with the bearer token `requester` (403).
    pub fn forbid(&self, requester: &str) {
        self.state
            .forbidden
            .lock()
            .unwrap()
            .insert(requester.to_owned());
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.mode.send_replace(mode);
    }

    /// Revokes one minted token (by its `jti`).
    pub fn revoke(&self, token: &str) {
        if let Some(jti) =
            claims_unverified(token).and_then(|c| c["jti"].as_str().map(str::to_owned))
        {
            self.state.revoked.lock().unwrap().insert(jti);
        }
    }

    /// Every TokenRequest so far, in order of arrival.
    pub fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().unwrap().clone()
    }

    /// TokenRequests received so far.
    pub fn received(&self) -> u64 {
        *self.state.received.borrow()
    }

    /// Tokens minted so far.
    pub fn minted(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Minted { .. }))
            .count()
    }

    /// Waits until `n` TokenRequests have arrived in all (a deadline in the runtime's
    /// time: simulated under a paused clock).
    pub async fn wait_received(&self, n: u64, deadline: Duration) {
        let mut rx = self.state.received.subscribe();
        let waited = tokio::time::timeout(deadline, rx.wait_for(|&seen| seen >= n)).await;
        assert!(
            waited.is_ok(),
            "the API received {} of {n} TokenRequests",
            self.received()
        );
    }

    /// Whether `token` is a valid token of this API for `audience`, now.
    pub fn verify(&self, token: &str, audience: &str) -> Result<Value, Refusal> {
        let mut validation = Validation::new(Algorithm::HS256);
        // Dates are checked below on the API's clock, not the system's.
        validation.validate_exp = false;
        validation.set_audience(&[audience]);
        validation.set_issuer(&[ISSUER]);
        let data = jsonwebtoken::decode::<Value>(
            token,
            &DecodingKey::from_secret(&self.state.key),
            &validation,
        )
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidAudience => Refusal::WrongAudience,
            _ => Refusal::Invalid,
        })?;
        let claims = data.claims;
        let now = secs((self.state.now)());
        if claims["exp"].as_u64().is_none_or(|exp| now >= exp) {
            return Err(Refusal::Expired);
        }
        let jti = claims["jti"].as_str().unwrap_or_default();
        if self.state.revoked.lock().unwrap().contains(jti) {
            return Err(Refusal::Revoked);
        }
        let k8s = &claims["kubernetes.io"];
        let key = (
            k8s["namespace"].as_str().unwrap_or_default().to_owned(),
            k8s["serviceaccount"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        let uid = k8s["serviceaccount"]["uid"].as_str();
        if self
            .state
            .accounts
            .lock()
            .unwrap()
            .get(&key)
            .map(String::as_str)
            != uid
        {
            return Err(Refusal::Revoked);
        }
        Ok(claims)
    }

    fn now(&self) -> SystemTime {
        (self.state.now)()
    }
}

async fn token_request(
    state: &State,
    requester: Option<String>,
    ns: &str,
    name: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let now = (state.now)();
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let spec = &request["spec"];
    let audiences: Vec<String> = match spec["audiences"].as_array() {
        Some(list) if !list.is_empty() => list
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect(),
        _ => vec![ISSUER.to_owned()],
    };
    let ttl = spec["expirationSeconds"].as_u64().unwrap_or(3600);
    let bound = spec.get("boundObjectRef").filter(|b| !b.is_null()).cloned();
    let mut call = Call {
        at: now,
        namespace: ns.to_owned(),
        name: name.to_owned(),
        audiences: audiences.clone(),
        expiration_seconds: ttl,
        bound: bound.clone(),
        requester: requester.clone(),
        outcome: Outcome::Stalled,
    };
    let record = |call: Call| {
        state.calls.lock().unwrap().push(call);
        state.received.send_modify(|n| *n += 1);
    };
    let refuse = |mut call: Call, code: StatusCode, message: &str, reason: &str| {
        call.outcome = Outcome::Refused(code);
        record(call);
        kube_api::status(code, message, reason, None)
    };
    let mode = *state.mode.borrow();
    match mode {
        Mode::Fail(code) => {
            let reason = code
                .canonical_reason()
                .unwrap_or("Failure")
                .replace(' ', "");
            return refuse(
                call,
                code,
                "the server is currently unable to handle the request",
                &reason,
            );
        }
        Mode::Stall => {
            record(call.clone());
            let mut rx = state.mode.subscribe();
            let _ = rx.wait_for(|m| *m != Mode::Stall).await;
            return kube_api::status(
                StatusCode::SERVICE_UNAVAILABLE,
                "stalled",
                "ServiceUnavailable",
                None,
            );
        }
        Mode::Serve => {}
    }
    if requester.is_some_and(|r| state.forbidden.lock().unwrap().contains(&r)) {
        let message = format!(
            "serviceaccounts \"{name}\" is forbidden: User \"system:serviceaccount:ops:deployer\" \
             cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"{ns}\""
        );
        return refuse(call, StatusCode::FORBIDDEN, &message, "Forbidden");
    }
    let uid = state
        .accounts
        .lock()
        .unwrap()
        .get(&(ns.to_owned(), name.to_owned()))
        .cloned();
    let Some(uid) = uid else {
        let message = format!("serviceaccounts \"{name}\" not found");
        return refuse(call, StatusCode::NOT_FOUND, &message, "NotFound");
    };
    if ttl < 600 {
        let message = format!(
            "TokenRequest.authentication.k8s.io \"{name}\" is invalid: spec.expirationSeconds: \
             Invalid value: {ttl}: may not specify a duration less than 10 minutes"
        );
        return refuse(call, StatusCode::UNPROCESSABLE_ENTITY, &message, "Invalid");
    }
    let iat = secs(now);
    let exp = iat + ttl;
    let jti = format!("{:032x}", state.serial.fetch_add(1, Ordering::SeqCst));
    let mut k8s = json!({
        "namespace": ns,
        "serviceaccount": {"name": name, "uid": uid},
    });
    if let Some(bound) = &bound
        && bound["kind"] == "Pod"
    {
        k8s["pod"] = json!({"name": bound["name"], "uid": bound["uid"]});
    }
    let claims = json!({
        "iss": ISSUER,
        "sub": format!("system:serviceaccount:{ns}:{name}"),
        "aud": audiences,
        "iat": iat,
        "nbf": iat,
        "exp": exp,
        "jti": jti,
        "kubernetes.io": k8s,
    });
    let token = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(&state.key),
    )
    .expect("claims serialize");
    let exp_at = UNIX_EPOCH + Duration::from_secs(exp);
    call.outcome = Outcome::Minted {
        jti,
        iat: UNIX_EPOCH + Duration::from_secs(iat),
        exp: exp_at,
    };
    record(call);
    kube_api::ok(
        StatusCode::CREATED,
        &json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": kube_api::rfc3339(now)},
            "spec": {"audiences": audiences, "expirationSeconds": ttl, "boundObjectRef": bound},
            "status": {"token": token, "expirationTimestamp": kube_api::rfc3339(exp_at)},
        }),
    )
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

fn bearer(headers: &http::HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    Some(value.strip_prefix("Bearer ")?.to_owned())
}

/// A JWT's claims, read without verifying it.
pub fn claims_unverified(token: &str) -> Option<Value> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// What an [`AudienceService`] saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub accepted: u64,
    pub expired: u64,
    pub revoked: u64,
    pub wrong_audience: u64,
    pub invalid: u64,
    /// Requests without a bearer token.
    pub anonymous: u64,
}

impl Tally {
    pub fn refused(&self) -> u64 {
        self.expired + self.revoked + self.wrong_audience + self.invalid + self.anonymous
    }
}

/// A service (plain HTTP on 127.0.0.1) that accepts only valid, unexpired tokens of a
/// [`TokenApi`] for its audience, as Vault's Kubernetes auth or any token-reviewing
/// service would. Stops when dropped.
pub struct AudienceService {
    addr: SocketAddr,
    tally: Arc<Mutex<Tally>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AudienceService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AudienceService {
    pub async fn start(api: &TokenApi, audience: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tally = Arc::new(Mutex::new(Tally::default()));
        let (api, audience, counts) = (api.clone(), audience.to_owned(), tally.clone());
        let task = super::serve::spawn(listener, None, move |req: Request<Incoming>| {
            let verdict = match bearer(req.headers()) {
                None => Err(None),
                Some(token) => api.verify(&token, &audience).map_err(Some),
            };
            let mut t = counts.lock().unwrap();
            let (code, text) = match verdict {
                Ok(_) => {
                    t.accepted += 1;
                    (StatusCode::OK, "ok")
                }
                Err(refusal) => {
                    match refusal {
                        None => t.anonymous += 1,
                        Some(Refusal::Expired) => t.expired += 1,
                        Some(Refusal::Revoked) => t.revoked += 1,
                        Some(Refusal::WrongAudience) => t.wrong_audience += 1,
                        Some(Refusal::Invalid) => t.invalid += 1,
                    }
                    (StatusCode::UNAUTHORIZED, "unauthorized")
                }
            };
            drop(t);
            async move {
                Response::builder()
                    .status(code)
                    .body(Full::new(Bytes::from_static(text.as_bytes())))
                    .unwrap()
            }
        });
        Self { addr, tally, task }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn tally(&self) -> Tally {
        self.tally.lock().unwrap().clone()
    }
}
