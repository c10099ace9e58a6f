//! [`FnSource`]: an async closure that returns the token's bytes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::{BoxError, FetchContext, Fetched, TokenSource};

type LoadFn =
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Vec<u8>, BoxError>> + Send>> + Send + Sync;

/// A closure given to [`TokenLoader`](crate::TokenLoader) failed.
///
/// Its message is the closure's own error after the loader's name: a closure must not put
/// the token in its errors.
#[derive(Debug, thiserror::Error)]
#[error("token loader {name} failed: {source}")]
pub struct LoaderError {
    /// The loader's name.
    pub name: String,
    /// The closure's error.
    #[source]
    pub source: BoxError,
}

/// A named async closure returning the token's bytes (built by
/// [`TokenLoader`](crate::TokenLoader)).
#[derive(Clone)]
pub struct FnSource {
    name: String,
    load: Arc<LoadFn>,
}

impl FnSource {
    /// A source named `name` (in errors and logs) that calls `load` for the bytes.
    pub fn new<F, Fut, E>(name: impl Into<String>, load: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<u8>, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        Self {
            name: name.into(),
            load: Arc::new(move || {
                let fut = load();
                Box::pin(async move { fut.await.map_err(Into::into) })
            }),
        }
    }
}

impl fmt::Debug for FnSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnSource")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TokenSource for FnSource {
    type Error = LoaderError;

    async fn fetch(&self, _cx: FetchContext) -> Result<Fetched, LoaderError> {
        (self.load)()
            .await
            .map(Fetched::new)
            .map_err(|source| LoaderError {
                name: self.name.clone(),
                source,
            })
    }

    fn describe(&self) -> String {
        format!("loader {}", self.name)
    }

    /// Like a file's: a closure may read anything, and says nothing of its token's dates.
    fn default_refresh_interval(&self) -> Option<std::time::Duration> {
        Some(super::FILE_REFRESH_INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_name() {
        let source = FnSource::new("vault", || async { Ok::<_, std::io::Error>(Vec::new()) });
        assert_eq!(format!("{source:?}"), r#"FnSource { name: "vault", .. }"#);
    }

    #[test]
    fn a_loader_is_called_again_every_minute_by_default() {
        // Like a file: nothing says when its token expires.
        let source = FnSource::new("vault", || async { Ok::<_, std::io::Error>(Vec::new()) });
        assert_eq!(
            source.default_refresh_interval(),
            Some(std::time::Duration::from_secs(60))
        );
    }
}
