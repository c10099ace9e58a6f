//! The hot path's "is my cached token still current?", two ways, in services that are
//! otherwise the same as `BearerService` (same header logic, same store layout: an
//! `ArcSwap` of the token and a generation counter written after it):
//!
//! - [`GenerationCheck`]: what `BearerService::authorize` does — one atomic load of the
//!   store's generation, compared with the generation inside the cached token;
//! - [`CacheCheck`]: `arc_swap::Cache` — one relaxed load of the `ArcSwap`'s pointer,
//!   compared with the cached `Arc`'s.
//!
//! The crate's own types keep the store private, so the two are built here on the public
//! [`Token`]; the real `BearerLayer` runs beside them in the same rounds, to show the copy
//! of ours costs what the original does.

// Each bench uses some of this.
#![allow(dead_code)]

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use arc_swap::{ArcSwap, Cache};
use bearer_reload::Token;
use http::HeaderMap;
use http::header::AUTHORIZATION;
use tower::Service;

use crate::common::{Req, Res};

/// A token with the generation the store gave it.
#[derive(Debug)]
pub(crate) struct Versioned {
    token: Token,
    generation: u64,
}

#[derive(Debug)]
struct Shared {
    current: ArcSwap<Versioned>,
    /// Mirrors `current.generation`, written after it.
    generation: AtomicU64,
}

/// A store laid out as `TokenStore` is.
#[derive(Clone, Debug)]
pub(crate) struct MirrorStore(Arc<Shared>);

impl MirrorStore {
    pub(crate) fn new(token: &str) -> Self {
        MirrorStore(Arc::new(Shared {
            current: ArcSwap::from_pointee(Versioned {
                token: Token::parse(token.as_bytes()).expect("a token"),
                generation: 1,
            }),
            generation: AtomicU64::new(1),
        }))
    }

    /// Installs `token` as the next generation, as `TokenStore` does.
    pub(crate) fn rotate(&self, token: &str) {
        let to = self.0.current.load().generation + 1;
        let token = Token::parse(token.as_bytes()).expect("a token");
        self.0.current.store(Arc::new(Versioned {
            token,
            generation: to,
        }));
        self.0.generation.store(to, Ordering::Release);
    }

    /// The generation-check service over `inner`.
    pub(crate) fn generation_check<S>(&self, inner: S) -> GenerationCheck<S> {
        GenerationCheck {
            inner,
            cached: self.0.current.load_full(),
            store: self.clone(),
        }
    }

    /// The `arc_swap::Cache` service over `inner`.
    pub(crate) fn cache_check<S>(&self, inner: S) -> CacheCheck<S> {
        CacheCheck {
            inner,
            cache: Cache::new(self.clone()),
        }
    }
}

/// What `arc_swap::Cache` needs: something that derefs to the `ArcSwap`, here through the
/// same one pointer as the store's other fields.
impl Deref for MirrorStore {
    type Target = ArcSwap<Versioned>;

    fn deref(&self) -> &ArcSwap<Versioned> {
        &self.0.current
    }
}

/// `insert`, then put a request's own value back (the layer's default: keep it).
#[inline(always)]
fn put(headers: &mut HeaderMap, cached: &Versioned) -> Option<u64> {
    if let Some(own) = headers.insert(AUTHORIZATION, cached.token.header_value().clone()) {
        headers.insert(AUTHORIZATION, own);
        return None;
    }
    Some(cached.generation)
}

/// `BearerService`'s check: the store's generation against the cached token's.
#[derive(Clone, Debug)]
pub(crate) struct GenerationCheck<S> {
    inner: S,
    store: MirrorStore,
    cached: Arc<Versioned>,
}

impl<S: Service<Req, Response = Res>> Service<Req> for GenerationCheck<S> {
    type Response = Res;
    type Error = S::Error;
    type Future = S::Future;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, mut req: Req) -> S::Future {
        if self.store.0.generation.load(Ordering::Acquire) != self.cached.generation {
            self.cached = self.store.0.current.load_full();
        }
        std::hint::black_box(put(req.headers_mut(), &self.cached));
        self.inner.call(req)
    }
}

/// `arc_swap::Cache`'s check: the `ArcSwap`'s pointer against the cached `Arc`'s.
#[derive(Clone, Debug)]
pub(crate) struct CacheCheck<S> {
    inner: S,
    cache: Cache<MirrorStore, Arc<Versioned>>,
}

impl<S: Service<Req, Response = Res>> Service<Req> for CacheCheck<S> {
    type Response = Res;
    type Error = S::Error;
    type Future = S::Future;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, mut req: Req) -> S::Future {
        std::hint::black_box(put(req.headers_mut(), self.cache.load()));
        self.inner.call(req)
    }
}
