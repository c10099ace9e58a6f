//! A kubeconfig file as the source of a client's credentials
//! ([`Credentials::from_kubeconfig`](super::Credentials::from_kubeconfig)): the file is one
//! store, and each credential inline in it is a store that follows it ([`Part`]).
//!
//! A read installs the whole file or nothing: it must parse, hold the context and valid
//! inline credentials, and keep the [`Shape`] the client was built for.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ::kube::config::KubeConfigOptions;

use super::Error;
use crate::source::{FetchContext, Fetched, FileSource, TokenSource};
use crate::store::Store;

mod part;
mod read;
mod snapshot;

use part::Part;
pub(super) use part::Which;
pub(super) use read::ca_file;
use read::{Problem, absolute_paths, select};
pub(crate) use snapshot::Snapshot;
use snapshot::{Inline, Shape, snapshot};

/// The kubeconfig file, parsed at each read by its [`KubeconfigParser`].
pub(crate) struct KubeconfigSource {
    file: FileSource,
    parser: KubeconfigParser,
}

impl KubeconfigSource {
    fn new(path: &Path, selection: KubeConfigOptions, shape: Shape) -> Self {
        let (path, file) = (path.to_owned(), FileSource::new(path));
        Self {
            file,
            parser: KubeconfigParser {
                path,
                selection,
                shape,
            },
        }
    }
}

/// The chosen context of a read of the file, parsed into its [`Snapshot`], held to the
/// [`Shape`] the client was built for.
#[derive(Clone)]
pub(crate) struct KubeconfigParser {
    path: PathBuf,
    selection: KubeConfigOptions,
    shape: Shape,
}

fn problem(path: &Path) -> impl Fn(Problem) -> Error + '_ {
    move |problem| Error::Kubeconfig {
        path: path.to_owned(),
        source: problem.into(),
    }
}

impl KubeconfigParser {
    pub(super) fn parse(&self, bytes: &[u8], now: SystemTime) -> Result<Snapshot, Error> {
        let error = problem(&self.path);
        let (_, selected) = select(bytes, &self.selection).map_err(&error)?;
        let snapshot = snapshot(&selected, now).map_err(&error)?;
        if let Some(change) = snapshot.shape.change_from(&self.shape) {
            return Err(error(Problem::Changed(change)));
        }
        Ok(snapshot)
    }
}

impl TokenSource for KubeconfigSource {
    type Error = Error;

    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, Error> {
        let read = self.file.fetch(cx).await;
        read.map_err(|e| problem(&self.parser.path)(Problem::File(e)))
    }

    fn describe(&self) -> String {
        let KubeconfigParser { path, shape, .. } = &self.parser;
        format!("kubeconfig {} (context {})", path.display(), shape.context)
    }

    fn paths(&self) -> &[PathBuf] {
        self.file.paths()
    }

    fn default_refresh_interval(&self) -> Option<Duration> {
        self.file.default_refresh_interval()
    }
}

/// The file at `path` read once: the kube `Config` of the chosen context, and the store of
/// the file when it holds credentials inline.
pub(super) async fn first_read(
    path: &Path,
    options: &KubeConfigOptions,
) -> Result<(::kube::Config, Option<Store<Snapshot>>), Error> {
    let error = problem(path);
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| error(Problem::Read(e)))?;
    let (mut kubeconfig, selected) = select(&bytes, options).map_err(&error)?;
    // Checked now, so that a bad inline credential is this call's error.
    let Snapshot { shape, .. } = snapshot(&selected, SystemTime::now()).map_err(&error)?;
    absolute_paths(&mut kubeconfig, path);
    let ca_file = ca_file(&kubeconfig, options);
    let options_ = options.clone();
    let mut config = super::kube_loader(move || {
        let load = ::kube::Config::from_custom_kubeconfig(kubeconfig, &options_);
        tokio::runtime::Handle::current().block_on(load)
    })
    .await
    .map_err(|e| Error::Kube(e.into()))?;
    if config.root_cert_file.is_none() {
        config.root_cert_file = ca_file;
    }
    let inline = shape.inline;
    if inline.token {
        // The token store's header goes on the requests: kube's auth layer would overwrite it.
        config.auth_info.token = None;
    }
    if !inline.any() {
        return Ok((config, None));
    }
    let source = KubeconfigSource::new(path, options.clone(), shape);
    let parser = source.parser.clone();
    let file = crate::StoreBuilder::of::<Snapshot>(source, parser, |store| store);
    Ok((config, Some(file.load().await?)))
}

/// The builder of a store of the file's `which` credential, a [`Part`] that follows the
/// file's store.
pub(super) fn follow<S>(
    file: &Store<Snapshot>,
    which: Which,
    builder: fn(Part) -> crate::StoreBuilder<S>,
) -> crate::StoreBuilder<S> {
    builder(Part::new(file, which)).follow(file)
}

/// Which of the context's credentials are inline.
pub(super) fn inline(file: &Store<Snapshot>) -> Inline {
    file.current().shape.inline
}

#[cfg(test)]
mod tests;
