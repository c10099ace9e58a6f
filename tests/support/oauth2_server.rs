//! A real OAuth 2.0 authorization server for the tests: `oidc-provider` (Node.js), one
//! process per [`AuthServer`], over HTTPS on 127.0.0.1 with a certificate made here.
//!
//! - [`AuthServer::start`] installs the server's npm packages on first use (`npm ci` in
//!   `tests/oauth2`, once per machine at a time), writes a CA and a certificate for
//!   127.0.0.1 and the server's config to a temporary directory, starts
//!   `node tests/oauth2/server.mjs`, and waits for its ready line. The process dies with the
//!   handle (and with the test process: it exits when its stdin closes).
//! - Clients of every kind the OAuth 2.0 source needs ([`ClientSpec`]): client_secret_basic,
//!   client_secret_post, private_key_jwt (RFC 7523), public; the client_credentials and
//!   token-exchange (RFC 8693) grants; introspection (RFC 7662) by a resource server and
//!   revocation (RFC 7009). [`ServerConfig::standard`] has one of each.
//! - The test's "cluster" keys ([`SigningKey`]): client assertions and subject tokens, signed
//!   RS256 or ES256 with keys made at test time.
//! - The server's admin endpoints: [`AuthServer::stats`], [`AuthServer::rotate_secret`],
//!   [`AuthServer::revoke_all`], [`AuthServer::set_ttl`].
//!
//! Needs Node.js (20.18 or newer) and npm on `PATH`, and the npm registry for the first
//! `npm ci`; without them it panics saying what to install. `OAUTH2_SERVER_VERBOSE=1` logs
//! every request the server sees to stderr.
//!
//! Secrets and tokens never appear in its panics or logs: [`Reply`]'s `Debug` shows their
//! lengths.
//!
//! Self-contained, so that examples can include it with
//! `#[path = "../tests/support/oauth2_server.rs"] mod oauth2_server;`.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, header};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rsa::rand_core::{OsRng, RngCore};
use rustls::pki_types::CertificateDer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

/// What to install when `node` or `npm` is missing.
pub const NODE_HELP: &str = "these tests need Node.js 20.18 or newer and npm: \
    apt-get install nodejs npm, or https://nodejs.org";

/// RFC 8693's grant type.
pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693's token type of a JWT subject token.
pub const TOKEN_TYPE_JWT: &str = "urn:ietf:params:oauth:token-type:jwt";
/// RFC 8693's token type of the issued access token.
pub const TOKEN_TYPE_ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";
/// RFC 7523's client assertion type.
pub const JWT_BEARER_ASSERTION: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// The resource indicator of [`ServerConfig::default`].
pub const RESOURCE: &str = "https://resource.test";
/// The issuer of the subject tokens of [`ServerConfig::standard`].
pub const CLUSTER_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// [`ServerConfig::standard`]'s client_secret_basic client (client_credentials and token
/// exchange, scopes `read write`).
pub const BASIC_CLIENT: (&str, &str) = ("basic-client", "basic-secret");
/// [`ServerConfig::standard`]'s client_secret_post client (client_credentials, scope `read`).
pub const POST_CLIENT: (&str, &str) = ("post-client", "post-secret");
/// [`ServerConfig::standard`]'s private_key_jwt client, whose key is the cluster key
/// (client_credentials and token exchange, scopes `read write`).
pub const JWT_CLIENT: &str = "jwt-client";
/// [`ServerConfig::standard`]'s public client (token exchange alone, scopes `read write`).
pub const PUBLIC_CLIENT: &str = "public-client";
/// [`ServerConfig::standard`]'s resource server: client_secret_basic, may introspect any
/// token.
pub const RESOURCE_SERVER: (&str, &str) = ("resource-server", "resource-server-secret");

/// How long the server may take to print its ready line.
pub const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long one HTTP request to the server may take.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// How long `npm ci` may take (and another process's `npm ci` may be waited for).
pub const NPM_DEADLINE: Duration = Duration::from_secs(600);
/// A lock on `npm ci` older than this was left by a process that died (its holder gives up
/// after [`NPM_DEADLINE`]).
const STALE_LOCK: Duration = Duration::from_secs(660);
/// The oldest Node.js that runs oidc-provider 9 (`URL.parse`, `crypto.hash`).
const NODE_MIN: (u64, u64) = (20, 18);

// ---------------------------------------------------------------------------------------
// Configuration.

/// The format of the access tokens the server issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenFormat {
    /// Random strings, stored on the server: introspectable and revocable.
    Opaque,
    /// ES256 JWTs (signed with the key at the server's `jwks_uri`). oidc-provider refuses to
    /// introspect or revoke them (`unsupported_token_type`).
    Jwt,
}

/// How a client authenticates at the token endpoint.
#[derive(Clone)]
pub enum ClientAuth {
    SecretBasic(String),
    SecretPost(String),
    /// RFC 7523 client assertions, verified with these public keys (`{"keys": [...]}`).
    PrivateKeyJwt(Value),
    /// A public client (`token_endpoint_auth_method: none`).
    None,
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SecretBasic(s) => write!(f, "SecretBasic(<{} bytes>)", s.len()),
            Self::SecretPost(s) => write!(f, "SecretPost(<{} bytes>)", s.len()),
            Self::PrivateKeyJwt(_) => f.write_str("PrivateKeyJwt"),
            Self::None => f.write_str("None"),
        }
    }
}

/// One client registered at the server.
#[derive(Clone, Debug)]
pub struct ClientSpec {
    pub client_id: String,
    pub auth: ClientAuth,
    /// The scopes it may ask for (each one of [`ServerConfig::resource_scope`]); `None`: any.
    pub scope: Option<String>,
    pub grant_types: Vec<String>,
    /// May introspect tokens issued to any client (a resource server).
    pub introspect_any: bool,
}

impl ClientSpec {
    fn new(client_id: &str, auth: ClientAuth) -> Self {
        Self {
            client_id: client_id.to_owned(),
            auth,
            scope: None,
            grant_types: vec!["client_credentials".to_owned()],
            introspect_any: false,
        }
    }

    /// A client_secret_basic client with the client_credentials grant.
    pub fn secret_basic(client_id: &str, secret: &str) -> Self {
        Self::new(client_id, ClientAuth::SecretBasic(secret.to_owned()))
    }

    /// A client_secret_post client with the client_credentials grant.
    pub fn secret_post(client_id: &str, secret: &str) -> Self {
        Self::new(client_id, ClientAuth::SecretPost(secret.to_owned()))
    }

    /// A private_key_jwt client whose assertions `jwks` (`{"keys": [...]}`) verifies, with
    /// the client_credentials grant.
    pub fn private_key_jwt(client_id: &str, jwks: Value) -> Self {
        Self::new(client_id, ClientAuth::PrivateKeyJwt(jwks))
    }

    /// A public client with the token-exchange grant alone.
    pub fn public(client_id: &str) -> Self {
        Self::new(client_id, ClientAuth::None).grant_types(&[TOKEN_EXCHANGE])
    }

    pub fn scope(mut self, scope: &str) -> Self {
        self.scope = Some(scope.to_owned());
        self
    }

    pub fn grant_types(mut self, grant_types: &[&str]) -> Self {
        self.grant_types = grant_types.iter().map(|g| (*g).to_owned()).collect();
        self
    }

    /// Adds the token-exchange grant.
    pub fn token_exchange(mut self) -> Self {
        if !self.grant_types.iter().any(|g| g == TOKEN_EXCHANGE) {
            self.grant_types.push(TOKEN_EXCHANGE.to_owned());
        }
        self
    }

    pub fn introspect_any(mut self) -> Self {
        self.introspect_any = true;
        self
    }

    fn secret(&self) -> Option<&str> {
        match &self.auth {
            ClientAuth::SecretBasic(s) | ClientAuth::SecretPost(s) => Some(s),
            _ => None,
        }
    }

    fn to_json(&self) -> Value {
        let mut client = json!({
            "client_id": self.client_id,
            "grant_types": self.grant_types,
            "introspect_any": self.introspect_any,
        });
        let method = match &self.auth {
            ClientAuth::SecretBasic(secret) => {
                client["client_secret"] = json!(secret);
                "client_secret_basic"
            }
            ClientAuth::SecretPost(secret) => {
                client["client_secret"] = json!(secret);
                "client_secret_post"
            }
            ClientAuth::PrivateKeyJwt(jwks) => {
                client["jwks"] = jwks.clone();
                "private_key_jwt"
            }
            ClientAuth::None => "none",
        };
        client["token_endpoint_auth_method"] = json!(method);
        if let Some(scope) = &self.scope {
            client["scope"] = json!(scope);
        }
        client
    }
}

/// What the server is started with. See `tests/oauth2/server.mjs` for each field.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// `expires_in` of the access tokens (until [`AuthServer::set_ttl`]).
    pub access_token_ttl_seconds: u64,
    /// The one resource server (RFC 8707), also the default resource.
    pub resource: String,
    /// The scopes the resource server knows.
    pub resource_scope: String,
    pub access_token_format: TokenFormat,
    pub clients: Vec<ClientSpec>,
    /// Token exchange: the `iss` of subject tokens.
    pub subject_issuer: Option<String>,
    /// Token exchange: the keys (`{"keys": [...]}`) that verify subject tokens.
    pub subject_jwks: Option<Value>,
    /// Token exchange: an `aud` subject tokens must have.
    pub subject_audience: Option<String>,
    /// A client_secret_basic client must use Basic, a client_secret_post one the form
    /// (default); `false`: either works for both, as oidc-provider has it.
    pub strict_client_auth_method: bool,
    /// Skew allowed on client assertions and subject tokens.
    pub clock_tolerance_seconds: u64,
    /// Logs every request to stderr (also on with `OAUTH2_SERVER_VERBOSE=1`).
    pub verbose: bool,
}

impl Default for ServerConfig {
    /// No clients yet; 60 s tokens for [`RESOURCE`], scopes `read write`, opaque.
    fn default() -> Self {
        Self {
            access_token_ttl_seconds: 60,
            resource: RESOURCE.to_owned(),
            resource_scope: "read write".to_owned(),
            access_token_format: TokenFormat::Opaque,
            clients: Vec::new(),
            subject_issuer: None,
            subject_jwks: None,
            subject_audience: None,
            strict_client_auth_method: true,
            clock_tolerance_seconds: 1,
            verbose: false,
        }
    }
}

impl ServerConfig {
    /// One client of each kind ([`BASIC_CLIENT`], [`POST_CLIENT`], [`JWT_CLIENT`],
    /// [`PUBLIC_CLIENT`], [`RESOURCE_SERVER`]), and token exchange of subject tokens from
    /// [`CLUSTER_ISSUER`] signed by `cluster` (which also signs [`JWT_CLIENT`]'s
    /// assertions).
    pub fn standard(cluster: &SigningKey) -> Self {
        Self {
            clients: vec![
                ClientSpec::secret_basic(BASIC_CLIENT.0, BASIC_CLIENT.1)
                    .scope("read write")
                    .token_exchange(),
                ClientSpec::secret_post(POST_CLIENT.0, POST_CLIENT.1).scope("read"),
                ClientSpec::private_key_jwt(JWT_CLIENT, cluster.jwks())
                    .scope("read write")
                    .token_exchange(),
                ClientSpec::public(PUBLIC_CLIENT).scope("read write"),
                ClientSpec::secret_basic(RESOURCE_SERVER.0, RESOURCE_SERVER.1).introspect_any(),
            ],
            subject_issuer: Some(CLUSTER_ISSUER.to_owned()),
            subject_jwks: Some(cluster.jwks()),
            ..Self::default()
        }
    }

    pub fn ttl(mut self, seconds: u64) -> Self {
        self.access_token_ttl_seconds = seconds;
        self
    }

    pub fn client(mut self, client: ClientSpec) -> Self {
        self.clients.push(client);
        self
    }

    pub fn format(mut self, format: TokenFormat) -> Self {
        self.access_token_format = format;
        self
    }

    fn to_json(&self, cert: &Path, key: &Path) -> Value {
        json!({
            "tls": { "cert": cert, "key": key },
            "access_token_ttl_seconds": self.access_token_ttl_seconds,
            "resource": self.resource,
            "resource_scope": self.resource_scope,
            "access_token_format": match self.access_token_format {
                TokenFormat::Opaque => "opaque",
                TokenFormat::Jwt => "jwt",
            },
            "clients": self.clients.iter().map(ClientSpec::to_json).collect::<Vec<_>>(),
            "subject_issuer": self.subject_issuer,
            "subject_jwks": self.subject_jwks,
            "subject_audience": self.subject_audience,
            "strict_client_auth_method": self.strict_client_auth_method,
            "clock_tolerance_seconds": self.clock_tolerance_seconds,
            "verbose": self.verbose,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Keys and JWTs.

/// A signing key of the test's "cluster": client assertions, subject tokens.
pub struct SigningKey {
    alg: Algorithm,
    kid: String,
    encoding: EncodingKey,
    jwk: Value,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({:?}, kid {:?})", self.alg, self.kid)
    }
}

impl SigningKey {
    /// A new RSA 2048 key for RS256, made by Node.js's crypto (in a tenth of a second; the
    /// `rsa` crate takes seconds in a debug build).
    pub fn rs256(kid: &str) -> Self {
        const SCRIPT: &str = "const { generateKeyPairSync } = require('node:crypto');
            const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
            const { n, e } = privateKey.export({ format: 'jwk' });
            const der = privateKey.export({ type: 'pkcs1', format: 'der' }).toString('base64');
            process.stdout.write(JSON.stringify({ n, e, der }));";
        let mut command = std::process::Command::new(node());
        command.args(["-e", SCRIPT]);
        let (status, stdout, stderr) = run_with_deadline(command, Duration::from_secs(30));
        assert!(
            status.success(),
            "node made no RSA key ({status}): {stderr}"
        );
        let key: Value = serde_json::from_str(&stdout).expect("node's RSA key as JSON");
        let der = STANDARD
            .decode(key["der"].as_str().expect("the key's DER"))
            .expect("the key's DER in base64");
        let jwk = json!({
            "kty": "RSA",
            "n": key["n"],
            "e": key["e"],
            "alg": "RS256",
            "use": "sig",
            "kid": kid,
        });
        Self {
            alg: Algorithm::RS256,
            kid: kid.to_owned(),
            encoding: EncodingKey::from_rsa_der(&der),
            jwk,
        }
    }

    /// A new P-256 key for ES256.
    pub fn es256(kid: &str) -> Self {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a P-256 key");
        let point = key.public_key_raw();
        assert_eq!(point.len(), 65, "an uncompressed P-256 point");
        let jwk = json!({
            "kty": "EC",
            "crv": "P-256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..]),
            "alg": "ES256",
            "use": "sig",
            "kid": kid,
        });
        Self {
            alg: Algorithm::ES256,
            kid: kid.to_owned(),
            encoding: EncodingKey::from_ec_der(&key.serialize_der()),
            jwk,
        }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// The public key as a JWK (with `kid`, `alg`, `use`).
    pub fn public_jwk(&self) -> Value {
        self.jwk.clone()
    }

    /// `{"keys": [the public JWK]}`.
    pub fn jwks(&self) -> Value {
        jwks(&[self])
    }

    /// `claims`, signed (header: `alg`, `kid`, `typ: JWT`).
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("a signed JWT")
    }

    /// An RFC 7523 client assertion: `iss` and `sub` the client, `aud` (the issuer or the
    /// token endpoint), `iat` now, `exp` after `lifetime`, a random `jti`.
    pub fn assertion(&self, client_id: &str, audience: &str, lifetime: Duration) -> String {
        let now = now_secs();
        self.sign(&json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "nbf": now,
            "exp": now + lifetime.as_secs(),
            "jti": random_id(),
        }))
    }

    /// A Kubernetes-projected-service-account-like token: `iss`, `sub`, `aud`, `iat`, `nbf`,
    /// `exp` after `lifetime`, a random `jti`, and for a `system:serviceaccount:NS:NAME`
    /// subject the `kubernetes.io` claim.
    pub fn subject_token(
        &self,
        issuer: &str,
        sub: &str,
        audience: &str,
        lifetime: Duration,
    ) -> String {
        let now = now_secs();
        let mut claims = json!({
            "iss": issuer,
            "sub": sub,
            "aud": [audience],
            "iat": now,
            "nbf": now,
            "exp": now + lifetime.as_secs(),
            "jti": random_id(),
        });
        if let Some(["system", "serviceaccount", namespace, name]) =
            Some(sub.split(':').collect::<Vec<_>>().as_slice())
        {
            claims["kubernetes.io"] = json!({
                "namespace": namespace,
                "serviceaccount": { "name": name, "uid": random_id() },
            });
        }
        self.sign(&claims)
    }
}

/// `{"keys": [...]}` of these keys' public JWKs.
pub fn jwks(keys: &[&SigningKey]) -> Value {
    json!({ "keys": keys.iter().map(|k| k.public_jwk()).collect::<Vec<_>>() })
}

/// The process's RS256 "cluster" key (kid `cluster`), made once.
pub fn cluster_key() -> &'static SigningKey {
    static KEY: OnceLock<SigningKey> = OnceLock::new();
    KEY.get_or_init(|| SigningKey::rs256("cluster"))
}

/// [`SigningKey::assertion`] with [`cluster_key`].
pub fn assertion(client_id: &str, audience: &str, lifetime: Duration) -> String {
    cluster_key().assertion(client_id, audience, lifetime)
}

/// [`SigningKey::subject_token`] with [`cluster_key`].
pub fn subject_token(issuer: &str, sub: &str, audience: &str, lifetime: Duration) -> String {
    cluster_key().subject_token(issuer, sub, audience, lifetime)
}

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs()
}

/// 16 random bytes, base64url.
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

// ---------------------------------------------------------------------------------------
// Replies and credentials.

/// An HTTP answer of the server: its status and its JSON body (`Value::Null` when empty,
/// a string when not JSON). `Debug` shows the lengths of tokens and secrets, not them.
#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub www_authenticate: Option<String>,
}

const SECRET_FIELDS: [&str; 5] = [
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "client_assertion",
];

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut body = self.body.clone();
        if let Value::String(text) = &body {
            body = json!(format!("<{} bytes of text>", text.len()));
        }
        if let Some(object) = body.as_object_mut() {
            for field in SECRET_FIELDS {
                if let Some(Value::String(value)) = object.get(field) {
                    let redacted = format!("<{} bytes>", value.len());
                    object.insert(field.to_owned(), json!(redacted));
                }
            }
        }
        f.debug_struct("Reply")
            .field("status", &self.status)
            .field("body", &body)
            .field("www_authenticate", &self.www_authenticate)
            .finish()
    }
}

impl Reply {
    /// The `access_token` of a 200; panics (showing the reply) otherwise.
    pub fn access_token(&self) -> &str {
        assert_eq!(self.status, 200, "a token response: {self:?}");
        self.body["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access_token in {self:?}"))
    }

    pub fn expires_in(&self) -> Option<u64> {
        self.body["expires_in"].as_u64()
    }

    /// The OAuth 2.0 `error` code.
    pub fn error(&self) -> Option<&str> {
        self.body["error"].as_str()
    }

    pub fn error_description(&self) -> Option<&str> {
        self.body["error_description"].as_str()
    }
}

/// How a request to the token, introspection or revocation endpoint authenticates its
/// client.
#[derive(Clone, Copy)]
pub enum Credentials<'a> {
    /// HTTP Basic (client_secret_basic): id and secret.
    Basic(&'a str, &'a str),
    /// In the form (client_secret_post): id and secret.
    Post(&'a str, &'a str),
    /// An RFC 7523 client assertion (private_key_jwt): id and the signed assertion.
    Assertion(&'a str, &'a str),
    /// A public client: `client_id` in the form.
    Public(&'a str),
    /// Nothing.
    None,
}

impl fmt::Debug for Credentials<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Basic(id, s) => write!(f, "Basic({id}, <{} bytes>)", s.len()),
            Self::Post(id, s) => write!(f, "Post({id}, <{} bytes>)", s.len()),
            Self::Assertion(id, a) => write!(f, "Assertion({id}, <{} bytes>)", a.len()),
            Self::Public(id) => write!(f, "Public({id})"),
            Self::None => f.write_str("None"),
        }
    }
}

/// `application/x-www-form-urlencoded` (as RFC 6749 §2.3.1 also encodes Basic credentials).
pub fn form_encode(pairs: &[(&str, &str)]) -> String {
    fn encode(out: &mut String, s: &str) {
        for byte in s.bytes() {
            match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    out.push(byte as char);
                }
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{byte:02X}")),
            }
        }
    }
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode(&mut out, name);
        out.push('=');
        encode(&mut out, value);
    }
    out
}

/// The `Authorization` value of client_secret_basic.
pub fn basic_authorization(client_id: &str, secret: &str) -> String {
    let id = form_encode(&[("", client_id)]);
    let secret = form_encode(&[("", secret)]);
    let pair = format!("{}:{}", &id[1..], &secret[1..]);
    format!("Basic {}", STANDARD.encode(pair))
}

/// What the server counted ([`AuthServer::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// POSTs to the token endpoint, by the client they named (`""`: none).
    pub token_requests: HashMap<String, u64>,
    pub token_requests_total: u64,
    /// Those answered with 4xx or 5xx.
    pub failed_token_requests: u64,
    pub failed_token_requests_by_client: HashMap<String, u64>,
    pub introspection_requests: u64,
    pub revocation_requests: u64,
}

impl Stats {
    /// Token requests that named `client_id`.
    pub fn requests_of(&self, client_id: &str) -> u64 {
        self.token_requests.get(client_id).copied().unwrap_or(0)
    }

    /// Failed token requests that named `client_id`.
    pub fn failures_of(&self, client_id: &str) -> u64 {
        self.failed_token_requests_by_client
            .get(client_id)
            .copied()
            .unwrap_or(0)
    }

    fn from_json(v: &Value) -> Self {
        let counts = |v: &Value| -> HashMap<String, u64> {
            v.as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default()
        };
        Self {
            token_requests: counts(&v["token_requests"]),
            token_requests_total: v["token_requests_total"].as_u64().unwrap_or(0),
            failed_token_requests: v["failed_token_requests"].as_u64().unwrap_or(0),
            failed_token_requests_by_client: counts(&v["failed_token_requests_by_client"]),
            introspection_requests: v["introspection_requests"].as_u64().unwrap_or(0),
            revocation_requests: v["revocation_requests"].as_u64().unwrap_or(0),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The server.

type Https = HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A running authorization server (a `node` child process); it dies with this handle.
pub struct AuthServer {
    issuer: String,
    token_endpoint: String,
    introspection_endpoint: String,
    revocation_endpoint: String,
    jwks_uri: String,
    ca_pem: String,
    ca_der: Vec<u8>,
    http: Https,
    introspector: (String, String),
    stderr: Arc<Mutex<String>>,
    pid: Option<u32>,
    // Closing stdin makes the server exit; `kill_on_drop` makes sure of it.
    stdin: Option<ChildStdin>,
    child: Child,
    _dir: tempfile::TempDir,
}

impl fmt::Debug for AuthServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthServer")
            .field("issuer", &self.issuer)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl AuthServer {
    /// Starts a server with `config` (installing its npm packages first if need be) and
    /// waits for it to listen. Panics, with the server's stderr, if it does not within
    /// [`START_DEADLINE`]. A client that [`AuthServer::introspect`] uses is added when
    /// `config` has no `introspect_any` client with a secret.
    pub async fn start(mut config: ServerConfig) -> AuthServer {
        let tools = match tokio::task::spawn_blocking(prepared).await {
            Ok(tools) => tools,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };

        let introspector = match config
            .clients
            .iter()
            .find(|c| c.introspect_any && c.secret().is_some())
        {
            Some(c) => (c.client_id.clone(), c.secret().unwrap().to_owned()),
            None => {
                let (id, secret) = ("harness-introspector".to_owned(), random_id());
                config
                    .clients
                    .push(ClientSpec::secret_basic(&id, &secret).introspect_any());
                (id, secret)
            }
        };
        config.verbose |= std::env::var_os("OAUTH2_SERVER_VERBOSE").is_some_and(|v| v != "0");
        let verbose = config.verbose;

        let dir = tempfile::tempdir().expect("a temporary directory");
        let pki = Pki::new();
        let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert_path, &pki.cert_pem).unwrap();
        std::fs::write(&key_path, &pki.key_pem).unwrap();
        let config_path = dir.path().join("config.json");
        let text = serde_json::to_string_pretty(&config.to_json(&cert_path, &key_path)).unwrap();
        std::fs::write(&config_path, text).unwrap();

        let started = Instant::now();
        let mut child = Command::new(&tools.node)
            .arg(tools.dir.join("server.mjs"))
            .arg(&config_path)
            .current_dir(&tools.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; {NODE_HELP}", tools.node.display()));
        let pid = child.id();
        let stdin = child.stdin.take();

        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_done = {
            let stderr = stderr.clone();
            let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    if verbose {
                        eprintln!("[oauth2 server {pid:?}] {line}");
                    }
                    append_capped(&stderr, &line);
                }
            })
        };

        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut other = Vec::new();
        let ready = tokio::time::timeout(START_DEADLINE, async {
            loop {
                match stdout.next_line().await {
                    Ok(Some(line)) => match serde_json::from_str::<Value>(&line) {
                        Ok(v) if v["ready"] == json!(true) => return Ok(v),
                        _ => other.push(line),
                    },
                    Ok(None) => return Err("its stdout closed".to_owned()),
                    Err(e) => return Err(format!("reading its stdout: {e}")),
                }
            }
        })
        .await
        .unwrap_or_else(|_| Err(format!("no ready line after {START_DEADLINE:?}")));

        let ready = match ready {
            Ok(ready) => ready,
            Err(why) => {
                let _ = child.start_kill();
                let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                let _ = tokio::time::timeout(Duration::from_secs(5), stderr_done).await;
                panic!(
                    "the OAuth 2.0 test server (node {}) did not start: {why}; exit: {status:?}\n\
                     other stdout lines: {other:?}\nstderr:\n{}",
                    tools.dir.join("server.mjs").display(),
                    stderr.lock().unwrap(),
                );
            }
        };
        if verbose {
            eprintln!(
                "[oauth2 server {pid:?}] ready after {:?}",
                started.elapsed()
            );
        }
        // Anything it prints later goes with its stderr.
        {
            let stderr = stderr.clone();
            tokio::spawn(async move {
                while let Ok(Some(line)) = stdout.next_line().await {
                    append_capped(&stderr, &format!("stdout: {line}"));
                }
            });
        }

        let field = |name: &str| -> String {
            ready[name]
                .as_str()
                .unwrap_or_else(|| panic!("no {name} in the ready line {ready}"))
                .to_owned()
        };
        AuthServer {
            issuer: field("issuer"),
            token_endpoint: field("token_endpoint"),
            introspection_endpoint: field("introspection_endpoint"),
            revocation_endpoint: field("revocation_endpoint"),
            jwks_uri: field("jwks_uri"),
            http: https_client(client_config(&pki.ca_der)),
            ca_pem: pki.ca_pem,
            ca_der: pki.ca_der,
            introspector,
            stderr,
            pid,
            stdin,
            child,
            _dir: dir,
        }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn token_endpoint(&self) -> &str {
        &self.token_endpoint
    }

    pub fn introspection_endpoint(&self) -> &str {
        &self.introspection_endpoint
    }

    pub fn revocation_endpoint(&self) -> &str {
        &self.revocation_endpoint
    }

    /// The keys that verify JWT access tokens ([`TokenFormat::Jwt`]).
    pub fn jwks_uri(&self) -> &str {
        &self.jwks_uri
    }

    /// The PEM of the CA that signed the server's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn ca_der(&self) -> &[u8] {
        &self.ca_der
    }

    /// A rustls (ring) client configuration that trusts the server's CA alone.
    pub fn client_config(&self) -> rustls::ClientConfig {
        client_config(&self.ca_der)
    }

    /// The server process's id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// What the server wrote to stderr so far (its last 256 KiB).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Closes the server's stdin and waits (up to 10 s) for it to exit; `true` if it
    /// exited successfully by itself.
    pub async fn stop(mut self) -> bool {
        drop(self.stdin.take());
        match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
            Ok(Ok(status)) => status.success(),
            _ => {
                let _ = self.child.start_kill();
                false
            }
        }
    }

    /// Sends `method url` with `headers` and `body`; panics if the server does not answer
    /// within [`REQUEST_DEADLINE`].
    pub async fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let mut request = Request::builder().method(method.clone()).uri(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(body.into())).expect("a request");
        let answer = tokio::time::timeout(REQUEST_DEADLINE, async {
            let response = self.http.request(request).await?;
            let status = response.status().as_u16();
            let www_authenticate = response
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bytes = response.into_body().collect().await?.to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, www_authenticate, bytes))
        })
        .await;
        let (status, www_authenticate, bytes) = match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => panic!("{method} {url}: {e}; server stderr:\n{}", self.stderr()),
            Err(_) => panic!(
                "{method} {url}: no answer within {REQUEST_DEADLINE:?}; server stderr:\n{}",
                self.stderr()
            ),
        };
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Reply {
            status,
            body,
            www_authenticate,
        }
    }

    /// POSTs `form` to `url`, authenticated with `credentials`.
    pub async fn post_form(
        &self,
        url: &str,
        credentials: Credentials<'_>,
        form: &[(&str, &str)],
    ) -> Reply {
        let mut pairs: Vec<(&str, &str)> = form.to_vec();
        let mut authorization = None;
        match credentials {
            Credentials::Basic(id, secret) => authorization = Some(basic_authorization(id, secret)),
            Credentials::Post(id, secret) => {
                pairs.push(("client_id", id));
                pairs.push(("client_secret", secret));
            }
            Credentials::Assertion(id, assertion) => {
                pairs.push(("client_id", id));
                pairs.push(("client_assertion_type", JWT_BEARER_ASSERTION));
                pairs.push(("client_assertion", assertion));
            }
            Credentials::Public(id) => pairs.push(("client_id", id)),
            Credentials::None => {}
        }
        let mut headers = vec![
            ("content-type", "application/x-www-form-urlencoded"),
            ("accept", "application/json"),
        ];
        if let Some(value) = &authorization {
            headers.push(("authorization", value));
        }
        self.request(Method::POST, url, &headers, form_encode(&pairs))
            .await
    }

    /// POSTs `form` to the token endpoint.
    pub async fn token(&self, credentials: Credentials<'_>, form: &[(&str, &str)]) -> Reply {
        self.post_form(&self.token_endpoint, credentials, form)
            .await
    }

    /// A client_credentials grant, for `scope` if given.
    pub async fn client_credentials(
        &self,
        credentials: Credentials<'_>,
        scope: Option<&str>,
    ) -> Reply {
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(scope) = scope {
            form.push(("scope", scope));
        }
        self.token(credentials, &form).await
    }

    /// A token exchange of the JWT `subject_token`, with `extra` parameters (`scope`,
    /// `resource`, `audience`, ...).
    pub async fn token_exchange(
        &self,
        credentials: Credentials<'_>,
        subject_token: &str,
        extra: &[(&str, &str)],
    ) -> Reply {
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", subject_token),
            ("subject_token_type", TOKEN_TYPE_JWT),
        ];
        form.extend_from_slice(extra);
        self.token(credentials, &form).await
    }

    /// RFC 7009 revocation of `token` by its client.
    pub async fn revoke(&self, credentials: Credentials<'_>, token: &str) -> Reply {
        self.post_form(
            &self.revocation_endpoint,
            credentials,
            &[("token", token), ("token_type_hint", "access_token")],
        )
        .await
    }

    /// RFC 7662 introspection of `token` by the resource server: the whole answer.
    pub async fn introspection(&self, token: &str) -> Value {
        let (id, secret) = &self.introspector;
        let reply = self
            .post_form(
                &self.introspection_endpoint,
                Credentials::Basic(id, secret),
                &[("token", token)],
            )
            .await;
        assert_eq!(reply.status, 200, "introspection: {reply:?}");
        reply.body
    }

    /// What a resource server answers to a request with `headers`: 200 when its bearer
    /// token is active (introspected as `RESOURCE_SERVER`), 401 otherwise.
    pub async fn resource_status(&self, headers: &http::HeaderMap) -> http::StatusCode {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match token {
            Some(token) if self.introspect(token).await => http::StatusCode::OK,
            _ => http::StatusCode::UNAUTHORIZED,
        }
    }

    /// Whether the server says `token` is active.
    pub async fn introspect(&self, token: &str) -> bool {
        self.introspection(token).await["active"] == json!(true)
    }

    async fn admin(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/admin/{path}", self.issuer);
        let reply = self
            .request(
                Method::POST,
                &url,
                &[("content-type", "application/json")],
                body.to_string(),
            )
            .await;
        assert_eq!(reply.status, 200, "POST /admin/{path}: {reply:?}");
        reply.body
    }

    /// What the server counted so far.
    pub async fn stats(&self) -> Stats {
        let url = format!("{}/admin/stats", self.issuer);
        let reply = self.request(Method::GET, &url, &[], Bytes::new()).await;
        assert_eq!(reply.status, 200, "GET /admin/stats: {reply:?}");
        Stats::from_json(&reply.body)
    }

    /// From now on only `new_secret` authenticates `client_id`.
    pub async fn rotate_secret(&self, client_id: &str, new_secret: &str) {
        self.admin(
            "rotate-secret",
            json!({ "client_id": client_id, "client_secret": new_secret }),
        )
        .await;
    }

    /// Revokes every access token issued so far; returns how many there were.
    pub async fn revoke_all(&self) -> u64 {
        self.admin("revoke-all", json!({})).await["revoked"]
            .as_u64()
            .unwrap_or(0)
    }

    /// Access tokens issued from now on live `seconds`.
    pub async fn set_ttl(&self, seconds: u64) {
        self.admin("set-ttl", json!({ "seconds": seconds })).await;
    }
}

fn append_capped(buffer: &Mutex<String>, line: &str) {
    const CAP: usize = 256 * 1024;
    let mut buffer = buffer.lock().unwrap();
    buffer.push_str(line);
    buffer.push('\n');
    if buffer.len() > CAP {
        let mut cut = buffer.len() - CAP;
        while !buffer.is_char_boundary(cut) {
            cut += 1;
        }
        buffer.drain(..cut);
    }
}

/// A CA and a certificate it signed for 127.0.0.1 and localhost.
struct Pki {
    ca_pem: String,
    ca_der: Vec<u8>,
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new() -> Self {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "bearer-reload OAuth 2.0 test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).unwrap();

        let key = KeyPair::generate().unwrap();
        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        server
            .distinguished_name
            .push(DnType::CommonName, "bearer-reload OAuth 2.0 test server");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = server.signed_by(&key, &ca_cert, &ca_key).unwrap();
        Self {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().to_vec(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

fn client_config(ca_der: &[u8]) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca_der.to_vec())).unwrap();
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

fn https_client(tls: rustls::ClientConfig) -> Https {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    HyperClient::builder(TokioExecutor::new()).build(https)
}

// ---------------------------------------------------------------------------------------
// Node.js, npm and the server's packages.

/// `node`, and `tests/oauth2` with its packages installed.
struct Tools {
    node: PathBuf,
    dir: PathBuf,
}

/// `node` on `PATH`, checked to be recent enough, once per process.
pub fn node() -> &'static Path {
    static NODE: OnceLock<PathBuf> = OnceLock::new();
    NODE.get_or_init(|| {
        let node = on_path("node").unwrap_or_else(|| panic!("no `node` on PATH: {NODE_HELP}"));
        check_node_version(&node);
        node
    })
}

/// Finds `node` and `npm` and installs the packages, once per process (and one `npm ci` at
/// a time per machine).
fn prepared() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let node = node().to_owned();
        let npm = on_path("npm").unwrap_or_else(|| panic!("no `npm` on PATH: {NODE_HELP}"));
        let dir = oauth2_dir();
        ensure_installed(&dir, &npm);
        Tools { node, dir }
    })
}

/// Runs `command` (stdin closed, stdout and stderr to temporary files) until it exits or
/// `limit` passes (then kills it and panics); its status, stdout and stderr (the last 8 KiB).
fn run_with_deadline(
    mut command: std::process::Command,
    limit: Duration,
) -> (std::process::ExitStatus, String, String) {
    let deadline = Instant::now() + limit;
    let stdout = tempfile::NamedTempFile::new().expect("a temporary file");
    let stderr = tempfile::NamedTempFile::new().expect("a temporary file");
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(stdout.reopen().unwrap())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}; {NODE_HELP}"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("a child's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{program} did not finish within {limit:?}; its output:\n{}\n{}",
                tail(stdout.path()),
                tail(stderr.path())
            );
        }
        // A child's exit has no event to wait on here: polled, to a deadline.
        std::thread::sleep(Duration::from_millis(10));
    };
    let output = std::fs::read_to_string(stdout.path()).unwrap_or_default();
    (status, output, tail(stderr.path()))
}

fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn check_node_version(node: &Path) {
    let mut command = std::process::Command::new(node);
    command.arg("--version");
    let (status, stdout, _) = run_with_deadline(command, Duration::from_secs(30));
    let version = stdout.trim().to_owned();
    let mut parts = version
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    assert!(
        status.success() && found >= NODE_MIN,
        "{} is Node.js {version:?}: {NODE_HELP}",
        node.display()
    );
}

/// `tests/oauth2` of the workspace: up from this package's directory (the examples'
/// package is a member one level down).
fn oauth2_dir() -> PathBuf {
    let start = Path::new(env!("CARGO_MANIFEST_DIR"));
    start
        .ancestors()
        .map(|dir| dir.join("tests/oauth2"))
        .find(|dir| dir.join("package.json").is_file())
        .unwrap_or_else(|| {
            panic!(
                "no tests/oauth2/package.json in {} or above",
                start.display()
            )
        })
}

/// Whether every dependency in `package-lock.json` is installed at its locked version.
fn installed(dir: &Path) -> bool {
    let read = |path: PathBuf| -> Option<Value> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    };
    let Some(lock) = read(dir.join("package-lock.json")) else {
        panic!("no readable {}", dir.join("package-lock.json").display());
    };
    let Some(packages) = lock["packages"].as_object() else {
        panic!(
            "{} has no packages",
            dir.join("package-lock.json").display()
        );
    };
    packages
        .iter()
        .filter(|(path, _)| path.starts_with("node_modules/"))
        .all(|(path, locked)| {
            read(dir.join(path).join("package.json"))
                .is_some_and(|installed| installed["version"] == locked["version"])
        })
}

fn ensure_installed(dir: &Path, npm: &Path) {
    if installed(dir) {
        return;
    }
    let deadline = Instant::now() + NPM_DEADLINE;
    let _lock = DirLock::acquire(&npm_lock_path(dir), deadline);
    // Another process may have installed them while this one waited.
    if installed(dir) {
        return;
    }
    let started = Instant::now();
    let mut command = std::process::Command::new(npm);
    command
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .env("npm_config_update_notifier", "false")
        .env("npm_config_progress", "false");
    let remaining = deadline.saturating_duration_since(Instant::now());
    let (status, stdout, stderr) = run_with_deadline(command, remaining);
    assert!(
        status.success(),
        "`npm ci --no-audit --no-fund` in {} failed ({status}); it needs the npm registry. \
         Its output:\n{stdout}\n{stderr}",
        dir.display(),
    );
    assert!(
        installed(dir),
        "`npm ci` in {} did not install what package-lock.json locks; its output:\n\
         {stdout}\n{stderr}",
        dir.display(),
    );
    eprintln!(
        "oauth2 test server: `npm ci` in {} took {:?}",
        dir.display(),
        started.elapsed()
    );
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(8 * 1024);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    text[start..].to_owned()
}

/// Where processes that would run `npm ci` in `dir` take turns: a directory in the temp
/// directory, named after `dir`.
fn npm_lock_path(dir: &Path) -> PathBuf {
    let name: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    std::env::temp_dir().join(format!("bearer-reload-npm-ci{name}.lock"))
}

/// An exclusive lock across processes: a directory that exists while it is held
/// (`create_dir` is atomic), with its owner's pid inside.
struct DirLock(PathBuf);

impl DirLock {
    fn acquire(path: &Path, deadline: Instant) -> Self {
        loop {
            match std::fs::create_dir(path) {
                Ok(()) => {
                    let _ = std::fs::write(path.join("pid"), std::process::id().to_string());
                    return Self(path.to_owned());
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if Self::stale(path) {
                        // Renamed first, so that only one waiter removes it.
                        let aside = path.with_extension(format!("stale.{}", random_id()));
                        if std::fs::rename(path, &aside).is_ok() {
                            let _ = std::fs::remove_dir_all(&aside);
                        }
                        continue;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "another process held {} (running `npm ci`) for longer than \
                         {NPM_DEADLINE:?}; remove it if no test is running",
                        path.display()
                    );
                    // The other process's `npm ci` ends with no event to wait on: polled,
                    // to a deadline.
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("cannot create the lock {}: {e}", path.display()),
            }
        }
    }

    /// Left by a process that died: its owner's pid is gone, or it is older than any
    /// `npm ci` may take (the pid may have been reused).
    fn stale(path: &Path) -> bool {
        let owner_gone = std::fs::read_to_string(path.join("pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok())
            .is_some_and(|pid| {
                Path::new("/proc/self").exists() && !Path::new(&format!("/proc/{pid}")).exists()
            });
        let old = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_LOCK);
        owner_gone || old
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0.join("pid"));
        let _ = std::fs::remove_dir(&self.0);
    }
}
