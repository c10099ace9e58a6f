//! [`FnSource`]: an async closure that returns the token's bytes.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::{BoxError, BoxFetch, FetchContext, Fetched, TokenSource};

/// A named async closure returning the token's bytes.
///
/// The closure's error is the fetch's, boxed:
/// [`LoadError::downcast_ref`](crate::LoadError::downcast_ref) gets it back. It must not
/// hold the token.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bearer_reload::LoadError> {
/// use bearer_reload::TokenStore;
/// use bearer_reload::source::FnSource;
///
/// let source = FnSource::new("vault", || async { Ok::<_, std::io::Error>(b"abc".to_vec()) });
/// let store = TokenStore::builder(source).load().await?;
/// assert_eq!(store.current().header_value(), "Bearer abc");
/// assert_eq!(store.status().source, "loader vault");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FnSource {
    name: String,
    load: Arc<dyn Fn() -> BoxFetch<'static> + Send + Sync>,
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
                Box::pin(async move { fut.await.map(Fetched::new).map_err(Into::into) })
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
    type Error = BoxError;

    async fn fetch(&self, _cx: FetchContext) -> Result<Fetched, BoxError> {
        (self.load)().await
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
mod tests;
