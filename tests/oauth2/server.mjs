// A real OAuth 2.0 authorization server for bearer-reload's tests: oidc-provider (panva's
// OpenID-certified implementation) over HTTPS on 127.0.0.1, one process per server. Started
// by tests/support/oauth2_server.rs (`node server.mjs <config.json>`); usable by hand too.
//
// Config (JSON, the file named by argv[2]):
//   tls                       { "cert": "<PEM file>", "key": "<PEM file>" }  (required)
//   access_token_ttl_seconds  lifetime (`expires_in`) of access tokens; default 60.
//   resource                  the one resource server's indicator (RFC 8707), e.g.
//                             "https://resource.test" (required). It is the default resource:
//                             a token request without `resource` gets a token for it; any
//                             other `resource` (or token-exchange `audience`) is
//                             `invalid_target`.
//   resource_scope            the scopes the resource server knows; default "read write".
//                             client_credentials: a token has the requested scopes (none
//                             if none were requested); token exchange: the requested ones,
//                             by default all the client's `scope` (or all of these) allows.
//                             A scope beyond the client's `scope` is `invalid_scope`.
//   access_token_format       "opaque" (default) or "jwt". oidc-provider refuses to introspect
//                             or revoke JWT-format access tokens (`unsupported_token_type`,
//                             "Structured JWT Tokens cannot be introspected via the
//                             introspection_endpoint"), so tests of introspection or
//                             revocation need "opaque". JWTs are signed ES256 with the key
//                             published at the `jwks_uri`.
//   clients                   oidc-provider client metadata, one object per client:
//                             `client_id`, `client_secret`, `token_endpoint_auth_method`
//                             ("client_secret_basic" (default), "client_secret_post",
//                             "private_key_jwt" with `jwks: {keys: [...]}` of public JWKs, or
//                             "none" for a public client), `scope` (e.g. "read write"),
//                             `grant_types` (default ["client_credentials"]; add
//                             "urn:ietf:params:oauth:grant-type:token-exchange" for token
//                             exchange). `redirect_uris` and `response_types` default to [].
//                             One extra field, removed before oidc-provider sees the client:
//                             `introspect_any: true` lets the client introspect tokens issued
//                             to any client (a resource server); others introspect only
//                             their own tokens.
//   subject_issuer            token exchange: the `iss` every subject token must have.
//   subject_jwks              token exchange: {keys: [...]} that verify subject tokens.
//   subject_audience          token exchange, optional: an `aud` subject tokens must carry.
//   strict_client_auth_method true (default): a client registered for client_secret_basic
//                             must send its secret in the Authorization header, one for
//                             client_secret_post in the form; otherwise `invalid_client`.
//                             false: oidc-provider's own behaviour, which accepts either for
//                             both.
//   clock_tolerance_seconds   skew allowed on `exp`/`iat`/`nbf` of client assertions and
//                             subject tokens; default 1.
//   verbose                   true: log every request and every failed grant to stderr.
//
// private_key_jwt (RFC 7523): the assertion's `iss` and `sub` are the client_id; its `aud`
// may be the issuer (`https://127.0.0.1:PORT`), the token endpoint URL, or the URL of the
// endpoint it is sent to (introspection, revocation); an array containing one of these also
// passes. `exp` and `jti` are required, and a `jti` is accepted only once (replay detection).
//
// Token exchange (RFC 8693), for any client registered with the grant type (confidential or
// `none`): POST grant_type=urn:ietf:params:oauth:grant-type:token-exchange,
// subject_token=<JWT>, subject_token_type=urn:ietf:params:oauth:token-type:jwt (or
// ...:id_token), optionally resource, audience, scope, requested_token_type (only
// ...:access_token). The subject token is verified with `subject_jwks` (RS/PS/ES/EdDSA),
// `iss` must equal `subject_issuer`, `sub` and `exp` are required. The answer is
// {access_token, issued_token_type: "urn:ietf:params:oauth:token-type:access_token",
// token_type: "Bearer", expires_in, scope}; the access token is an oidc-provider AccessToken
// whose `sub` (in introspection) is the subject token's `sub`. An invalid subject token is
// 400 `invalid_grant` with an `error_description` saying why.
//
// Admin endpoints (JSON, no authentication: a test server on loopback):
//   GET  /admin/stats          {token_requests: {client_id: n}, token_requests_total,
//                               failed_token_requests, failed_token_requests_by_client,
//                               introspection_requests, revocation_requests}; every POST to
//                               the token endpoint counts, under the client it named
//                               ("" when it named none).
//   POST /admin/rotate-secret  {client_id, client_secret}: from now on only the new secret
//                               authenticates the client (clients live in this process's
//                               adapter, and oidc-provider caches them by their metadata).
//   POST /admin/revoke-all     every access token issued so far is revoked: {revoked: n}.
//   POST /admin/set-ttl        {seconds}: access tokens issued from now on live that long.
//
// Once listening it prints one line to stdout:
//   {"ready":true,"issuer":...,"token_endpoint":...,"introspection_endpoint":...,
//    "revocation_endpoint":...,"jwks_uri":...}
// and nothing else (oidc-provider's notices go to stderr). It exits when stdin closes (its
// parent died) and on SIGTERM or SIGINT.

import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import process from 'node:process';

// stdout carries the ready line alone: oidc-provider prints notices with console.info, so
// console goes to stderr before oidc-provider is imported (dynamically, for that reason).
const stderrLog = (...args) => console.error(...args);
console.log = stderrLog;
console.info = stderrLog;
console.debug = stderrLog;

const { createLocalJWKSet, exportJWK, generateKeyPair, jwtVerify } = await import('jose');
const { default: Provider, errors } = await import('oidc-provider');

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const TYPE_ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';
const TYPE_JWT = 'urn:ietf:params:oauth:token-type:jwt';
const TYPE_ID_TOKEN = 'urn:ietf:params:oauth:token-type:id_token';

function fail(message) {
  console.error(`oauth2 test server: ${message}`);
  process.exit(2);
}

if (!process.argv[2]) fail('usage: node server.mjs <config.json>');
let config;
try {
  config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
} catch (e) {
  fail(`cannot read the config ${process.argv[2]}: ${e.message}`);
}
if (!config.tls?.cert || !config.tls?.key) fail('config.tls.cert and config.tls.key are required');
if (typeof config.resource !== 'string') fail('config.resource is required');

const verbose = config.verbose === true;
const strictClientAuthMethod = config.strict_client_auth_method ?? true;
const clockTolerance = config.clock_tolerance_seconds ?? 1;
const resourceScope = config.resource_scope ?? 'read write';
const accessTokenFormat = config.access_token_format ?? 'opaque';
if (!['opaque', 'jwt'].includes(accessTokenFormat)) fail('access_token_format: "opaque" or "jwt"');

function positiveSeconds(value, what) {
  if (!Number.isSafeInteger(value) || value <= 0) fail(`${what} must be a positive integer`);
  return value;
}

const state = {
  ttl: positiveSeconds(config.access_token_ttl_seconds ?? 60, 'access_token_ttl_seconds'),
  introspectors: new Set(),
  stats: {
    token_requests: {},
    token_requests_total: 0,
    failed_token_requests: 0,
    failed_token_requests_by_client: {},
    introspection_requests: 0,
    revocation_requests: 0,
  },
};

// ---------------------------------------------------------------------------------------
// Storage: one in-memory map for every model, clients included, so that clients can be
// changed at runtime (oidc-provider caches a stored client under a hash of its metadata:
// new metadata, a new client) and every token can be revoked at once.

const store = new Map(); // `${model}:${id}` -> { payload, expiresAt }

class Adapter {
  constructor(model) {
    this.model = model;
  }

  key(id) {
    return `${this.model}:${id}`;
  }

  async upsert(id, payload, expiresIn) {
    const expiresAt = typeof expiresIn === 'number'
      ? Date.now() + (expiresIn + clockTolerance + 60) * 1000
      : Infinity;
    store.set(this.key(id), { payload: structuredClone(payload), expiresAt });
  }

  async find(id) {
    const key = this.key(id);
    const entry = store.get(key);
    if (!entry) return undefined;
    if (entry.expiresAt <= Date.now()) {
      store.delete(key);
      return undefined;
    }
    return structuredClone(entry.payload);
  }

  async findByUid(uid) {
    for (const [key, entry] of store) {
      if (key.startsWith(`${this.model}:`) && entry.payload.uid === uid) {
        return structuredClone(entry.payload);
      }
    }
    return undefined;
  }

  async findByUserCode(userCode) {
    for (const [key, entry] of store) {
      if (key.startsWith(`${this.model}:`) && entry.payload.userCode === userCode) {
        return structuredClone(entry.payload);
      }
    }
    return undefined;
  }

  async consume(id) {
    const entry = store.get(this.key(id));
    if (entry) entry.payload.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) {
    store.delete(this.key(id));
  }

  async revokeByGrantId(grantId) {
    for (const [key, entry] of store) {
      if (entry.payload.grantId === grantId) store.delete(key);
    }
  }
}

const ACCESS_TOKEN_MODELS = ['AccessToken', 'ClientCredentials', 'RefreshToken'];

function revokeAll() {
  let revoked = 0;
  for (const key of [...store.keys()]) {
    if (ACCESS_TOKEN_MODELS.some((model) => key.startsWith(`${model}:`))) {
      store.delete(key);
      revoked += 1;
    }
  }
  return revoked;
}

for (const client of config.clients ?? []) {
  if (typeof client.client_id !== 'string') fail('every client needs a client_id');
  const { introspect_any: introspectAny, ...metadata } = client;
  if (introspectAny) state.introspectors.add(client.client_id);
  const stored = {
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    ...metadata,
  };
  new Adapter('Client').upsert(client.client_id, stored);
}

// ---------------------------------------------------------------------------------------
// The provider: constructed once the server listens, when the issuer (its port) is known.

const server = https.createServer({
  cert: readFileSync(config.tls.cert),
  key: readFileSync(config.tls.key),
});

let provider;
let handle;

server.on('request', (req, res) => {
  if (verbose) console.error(`${req.method} ${req.url}`);
  if (req.url.startsWith('/admin/')) {
    admin(req, res).catch((e) => json(res, 500, { error: 'server_error', error_description: e.message }));
  } else if (handle) {
    handle(req, res);
  } else {
    json(res, 503, { error: 'temporarily_unavailable', error_description: 'starting' });
  }
});

await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(0, '127.0.0.1', resolve);
});
const issuer = `https://127.0.0.1:${server.address().port}`;

// ES256: a P-256 key is made in a millisecond, an RSA one in up to a second.
const signingKey = await generateKeyPair('ES256', { extractable: true });
const signingJwk = { ...(await exportJWK(signingKey.privateKey)), alg: 'ES256', use: 'sig', kid: 'test-es256' };

function resourceServerInfo() {
  return {
    scope: resourceScope,
    audience: config.resource,
    accessTokenTTL: state.ttl,
    accessTokenFormat,
    ...(accessTokenFormat === 'jwt' ? { jwt: { sign: { alg: 'ES256' } } } : {}),
  };
}

provider = new Provider(issuer, {
  adapter: Adapter,
  clients: [],
  jwks: { keys: [signingJwk] },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  clockTolerance,
  // A client's `scope` may name only these.
  scopes: ['openid', 'offline_access', ...resourceScope.split(' ').filter(Boolean)],
  findAccount: async (_ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
  clientAuthMethods: ['client_secret_basic', 'client_secret_post', 'private_key_jwt', 'none'],
  clientDefaults: {
    grant_types: ['client_credentials'],
    response_types: [],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: 'ES256',
  },
  enabledJWA: {
    clientAuthSigningAlgValues: ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'Ed25519', 'EdDSA'],
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: {
      enabled: true,
      // The caller: a token's own client, or a resource server (`introspect_any`).
      allowedPolicy: async (_ctx, client, token) => (
        token.clientId === client.clientId || state.introspectors.has(client.clientId)
      ),
    },
    revocation: {
      enabled: true,
      // RFC 7009: a client revokes its own tokens (anything else is `invalid_request`).
      allowedPolicy: async (_ctx, client, token) => {
        if (token.clientId !== client.clientId) {
          throw new errors.InvalidRequest('client is not authorized to revoke the presented token');
        }
        return true;
      },
    },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => config.resource,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resourceIndicator) => {
        if (resourceIndicator !== config.resource) {
          throw new errors.InvalidTarget(`unknown resource ${resourceIndicator}`);
        }
        return resourceServerInfo();
      },
    },
  },
  ttl: {
    AccessToken: () => state.ttl,
    ClientCredentials: () => state.ttl,
    Grant: 3600,
    IdToken: 3600,
    Interaction: 600,
    RefreshToken: 86400,
    Session: 86400,
  },
});

const tokenEndpoint = provider.urlFor('token');
const introspectionEndpoint = provider.urlFor('introspection');
const revocationEndpoint = provider.urlFor('revocation');
const tokenPath = new URL(tokenEndpoint).pathname;
const introspectionPath = new URL(introspectionEndpoint).pathname;
const revocationPath = new URL(revocationEndpoint).pathname;

// ---------------------------------------------------------------------------------------
// Token exchange (RFC 8693).

const subjectKeys = config.subject_jwks ? createLocalJWKSet(config.subject_jwks) : undefined;

function invalidGrant(description) {
  return new errors.CustomOIDCProviderError('invalid_grant', description);
}

function allowedScopes(client) {
  const known = new Set(resourceScope.split(' ').filter(Boolean));
  const ofClient = client.scope ? client.scope.split(' ').filter(Boolean) : [...known];
  return new Set(ofClient.filter((s) => known.has(s)));
}

async function tokenExchange(ctx) {
  const { params, client } = ctx.oidc;
  for (const name of ['subject_token', 'subject_token_type']) {
    if (!params[name]) throw new errors.InvalidRequest(`missing required parameter '${name}'`);
  }
  if (![TYPE_JWT, TYPE_ID_TOKEN].includes(params.subject_token_type)) {
    throw new errors.InvalidRequest(`unsupported subject_token_type '${params.subject_token_type}'`);
  }
  if (params.requested_token_type && params.requested_token_type !== TYPE_ACCESS_TOKEN) {
    throw new errors.InvalidRequest(`unsupported requested_token_type '${params.requested_token_type}'`);
  }
  if (params.actor_token) throw new errors.InvalidRequest('actor_token is not supported');

  const targets = [params.resource, params.audience].flat().filter((t) => t !== undefined);
  for (const target of targets) {
    if (target !== config.resource) throw new errors.InvalidTarget(`unknown resource or audience ${target}`);
  }

  if (!subjectKeys || !config.subject_issuer) {
    throw invalidGrant('this server has no subject_jwks and subject_issuer configured');
  }
  let payload;
  try {
    ({ payload } = await jwtVerify(params.subject_token, subjectKeys, {
      issuer: config.subject_issuer,
      audience: config.subject_audience ?? undefined,
      clockTolerance,
      requiredClaims: ['sub', 'exp'],
      algorithms: ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'],
    }));
  } catch (e) {
    throw invalidGrant(`subject_token is invalid: ${e.code ?? 'ERR'}: ${e.message}`);
  }

  const allowed = allowedScopes(client);
  let scope = [...allowed];
  if (params.scope) {
    const requested = params.scope.split(' ').filter(Boolean);
    const denied = requested.filter((s) => !allowed.has(s));
    if (denied.length) throw new errors.InvalidScope('requested scope is not allowed', denied.join(' '));
    scope = requested;
  }

  const token = new ctx.oidc.provider.AccessToken({
    accountId: payload.sub,
    client,
    gty: 'token_exchange',
    scope: scope.join(' ') || undefined,
  });
  token.resourceServer = new ctx.oidc.provider.ResourceServer(config.resource, resourceServerInfo());
  ctx.oidc.entity('AccessToken', token);
  const accessToken = await token.save();

  ctx.body = {
    access_token: accessToken,
    issued_token_type: TYPE_ACCESS_TOKEN,
    token_type: token.tokenType,
    expires_in: token.expiration,
    scope: token.scope,
  };
}

provider.registerGrantType(
  TOKEN_EXCHANGE,
  tokenExchange,
  ['subject_token', 'subject_token_type', 'actor_token', 'actor_token_type', 'requested_token_type', 'audience', 'scope', 'resource'],
  ['resource', 'audience'],
);

// ---------------------------------------------------------------------------------------
// The request's Koa context, for the client-secret check below.

const requestContext = new AsyncLocalStorage();
provider.use((ctx, next) => requestContext.run(ctx, next));

if (strictClientAuthMethod) {
  // oidc-provider lets a client_secret_basic client authenticate like a client_secret_post
  // one and the other way round; here each must use the method it is registered with.
  const { prototype } = provider.Client;
  const compareClientSecret = prototype.compareClientSecret;
  prototype.compareClientSecret = function strictCompareClientSecret(actual) {
    const ctx = requestContext.getStore();
    if (ctx) {
      const used = ctx.headers.authorization !== undefined ? 'client_secret_basic' : 'client_secret_post';
      if (used !== this.clientAuthMethod) {
        throw new errors.InvalidClientAuth(`the client is registered for ${this.clientAuthMethod} but sent its secret with ${used}`);
      }
    }
    return compareClientSecret.call(this, actual);
  };
}

// ---------------------------------------------------------------------------------------
// Counting: every POST to the token endpoint, under the client it named.

function basicClientId(header) {
  const match = /^Basic\s+(.+)$/i.exec(header ?? '');
  if (!match) return undefined;
  const decoded = Buffer.from(match[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) return undefined;
  try {
    return decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, ' '));
  } catch {
    return decoded.slice(0, colon);
  }
}

function assertionIssuer(assertion) {
  try {
    const [, body] = String(assertion).split('.');
    return JSON.parse(Buffer.from(body, 'base64url').toString('utf8')).iss;
  } catch {
    return undefined;
  }
}

function requestingClient(ctx) {
  const oidc = ctx.oidc;
  return oidc?.client?.clientId
    ?? oidc?.params?.client_id
    ?? basicClientId(ctx.get('authorization'))
    ?? (oidc?.params?.client_assertion ? assertionIssuer(oidc.params.client_assertion) : undefined)
    ?? '';
}

provider.use(async (ctx, next) => {
  if (ctx.method !== 'POST') return next();
  if (ctx.path === tokenPath) {
    try {
      await next();
    } finally {
      const clientId = String(requestingClient(ctx));
      const { stats } = state;
      stats.token_requests_total += 1;
      stats.token_requests[clientId] = (stats.token_requests[clientId] ?? 0) + 1;
      if (ctx.status >= 400) {
        stats.failed_token_requests += 1;
        stats.failed_token_requests_by_client[clientId] = (stats.failed_token_requests_by_client[clientId] ?? 0) + 1;
      }
    }
    return undefined;
  }
  if (ctx.path === introspectionPath) state.stats.introspection_requests += 1;
  if (ctx.path === revocationPath) state.stats.revocation_requests += 1;
  return next();
});

if (verbose) {
  for (const event of ['grant.error', 'introspection.error', 'revocation.error', 'server_error']) {
    provider.on(event, (ctx, err) => {
      console.error(`${event}: ${err.error ?? err.name}: ${err.error_description ?? err.message}${err.error_detail ? ` (${err.error_detail})` : ''}`);
    });
  }
}

// ---------------------------------------------------------------------------------------
// Admin endpoints.

function json(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : {};
}

async function admin(req, res) {
  const path = new URL(req.url, issuer).pathname;
  if (req.method === 'GET' && path === '/admin/stats') {
    return json(res, 200, state.stats);
  }
  if (req.method !== 'POST') return json(res, 404, { error: 'not_found' });
  let body;
  try {
    body = await readJson(req);
  } catch (e) {
    return json(res, 400, { error: 'invalid_request', error_description: `body is not JSON: ${e.message}` });
  }
  switch (path) {
    case '/admin/rotate-secret': {
      const { client_id: clientId, client_secret: secret } = body;
      if (typeof clientId !== 'string' || typeof secret !== 'string' || !secret) {
        return json(res, 400, { error: 'invalid_request', error_description: 'client_id and client_secret (strings) are required' });
      }
      const adapter = new Adapter('Client');
      const metadata = await adapter.find(clientId);
      if (!metadata) return json(res, 404, { error: 'not_found', error_description: `no client ${clientId}` });
      await adapter.upsert(clientId, { ...metadata, client_secret: secret });
      return json(res, 200, { ok: true });
    }
    case '/admin/revoke-all':
      return json(res, 200, { revoked: revokeAll() });
    case '/admin/set-ttl': {
      const { seconds } = body;
      if (!Number.isSafeInteger(seconds) || seconds <= 0) {
        return json(res, 400, { error: 'invalid_request', error_description: 'seconds must be a positive integer' });
      }
      state.ttl = seconds;
      return json(res, 200, { ok: true });
    }
    default:
      return json(res, 404, { error: 'not_found' });
  }
}

// ---------------------------------------------------------------------------------------
// Ready.

handle = provider.callback();

function shutdown() {
  server.close();
  process.exit(0);
}
process.stdin.on('end', shutdown);
process.stdin.on('close', shutdown);
process.stdin.on('error', shutdown);
process.stdin.resume();
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

process.stdout.write(`${JSON.stringify({
  ready: true,
  issuer,
  token_endpoint: tokenEndpoint,
  introspection_endpoint: introspectionEndpoint,
  revocation_endpoint: revocationEndpoint,
  jwks_uri: provider.urlFor('jwks'),
})}\n`);
