//! Reading a kubeconfig: its YAML parsed, the context chosen as kube's loader chooses it,
//! its relative paths made absolute, and what makes one unusable ([`Problem`]).

use std::path::{Path, PathBuf};

use ::kube::config::{AuthInfo, Cluster, KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Why a kubeconfig cannot be used: the `#[source]` of [`Error::Kubeconfig`]. Never holds
/// a secret: a YAML error is reduced to where it is.
#[derive(Debug, thiserror::Error)]
pub(super) enum Problem {
    #[error("cannot be read")]
    Read(#[source] std::io::Error),
    #[error("cannot be read")]
    File(#[source] crate::source::FileError),
    #[error("is not UTF-8")]
    NotUtf8,
    #[error("is empty")]
    Empty,
    /// Where in the file, if the YAML error says: ` (line L, column C)`.
    #[error("does not parse as a kubeconfig{0}")]
    Yaml(String),
    #[error("sets no current-context, and none was chosen")]
    NoCurrentContext,
    #[error("has no context {0:?}")]
    NoContext(String),
    #[error("has no cluster {0:?} (of context {1:?})")]
    NoCluster(String, String),
    #[error("{field} of {owner} is not base64")]
    Base64 { field: &'static str, owner: String },
    #[error("the token of user {user} is not a valid token")]
    Token {
        user: String,
        #[source]
        source: crate::token::TokenError,
    },
    #[cfg(feature = "tls")]
    #[error("client-certificate-data and client-key-data of user {user} are not a client identity")]
    Identity {
        user: String,
        #[source]
        source: crate::tls::CertificateError,
    },
    #[cfg(feature = "tls")]
    #[error("certificate-authority-data of cluster {cluster} is not a CA bundle")]
    Roots {
        cluster: String,
        #[source]
        source: crate::tls::CertificateError,
    },
    #[error(
        "{0}, which a client built on the file cannot follow: the file's credentials stay as \
         they were; build a new client"
    )]
    Changed(String),
}

/// The chosen context of a kubeconfig, as the file held it at one read.
#[derive(Clone)]
pub(super) struct Selected {
    pub(super) context: String,
    pub(super) cluster_name: String,
    pub(super) user_name: String,
    pub(super) cluster: Cluster,
    pub(super) user: AuthInfo,
}

/// The file's YAML parsed, and the chosen context in it.
pub(super) fn select(
    bytes: &[u8],
    selection: &KubeConfigOptions,
) -> Result<(Kubeconfig, Selected), Problem> {
    let text = std::str::from_utf8(bytes).map_err(|_| Problem::NotUtf8)?;
    if text.trim().is_empty() {
        return Err(Problem::Empty);
    }
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| Problem::Yaml(location(&e)))?;
    let selected = selected(&kubeconfig, selection)?;
    Ok((kubeconfig, selected))
}

/// The chosen context of `kubeconfig`: the current one, unless `selection` says.
fn selected(kubeconfig: &Kubeconfig, selection: &KubeConfigOptions) -> Result<Selected, Problem> {
    let context = selection
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
        .ok_or(Problem::NoCurrentContext)?;
    let named = kubeconfig
        .contexts
        .iter()
        .find(|named| named.name == context)
        .and_then(|named| named.context.clone())
        .ok_or_else(|| Problem::NoContext(context.clone()))?;
    let cluster_name = selection.cluster.clone().unwrap_or(named.cluster);
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| Problem::NoCluster(cluster_name.clone(), context.clone()))?;
    // As kube and client-go: a missing user is no user.
    let user_name = selection.user.clone().or(named.user).unwrap_or_default();
    let user = kubeconfig
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .and_then(|u| u.auth_info.clone())
        .unwrap_or_default();
    Ok(Selected {
        context,
        cluster_name,
        user_name,
        cluster,
        user,
    })
}

/// The chosen cluster's `certificate-authority` path, unless it has
/// `certificate-authority-data` (which kube would use first).
pub(in crate::kube) fn ca_file(
    kubeconfig: &Kubeconfig,
    options: &KubeConfigOptions,
) -> Option<PathBuf> {
    let cluster = selected(kubeconfig, options).ok()?.cluster;
    let data = cluster.certificate_authority_data;
    cluster
        .certificate_authority
        .filter(|_| data.is_none())
        .map(PathBuf::from)
}

/// Where a YAML error is, as the YAML parser's error says: never the file's content.
fn location(error: &KubeconfigError) -> String {
    let at = match error {
        KubeconfigError::Parse(e) => e.location(),
        _ => None,
    };
    at.map_or_else(String::new, |at| {
        format!(" (line {}, column {})", at.line(), at.column())
    })
}

/// The relative paths of the file made absolute against its directory, as kube's
/// `Kubeconfig::read_from` makes them.
pub(super) fn absolute_paths(kubeconfig: &mut Kubeconfig, path: &Path) {
    let Some(dir) = path.parent() else {
        return;
    };
    let absolute = |file: &mut Option<String>| {
        if let Some(name) = file.as_mut()
            && Path::new(name).is_relative()
            && let Some(joined) = dir.join(&*name).to_str()
        {
            *name = joined.to_owned();
        }
    };
    let clusters = kubeconfig.clusters.iter_mut();
    for cluster in clusters.filter_map(|c| c.cluster.as_mut()) {
        absolute(&mut cluster.certificate_authority);
    }
    let users = kubeconfig.auth_infos.iter_mut();
    for user in users.filter_map(|u| u.auth_info.as_mut()) {
        absolute(&mut user.client_certificate);
        absolute(&mut user.client_key);
        absolute(&mut user.token_file);
        // A command with a separator, as kube: a bare name is looked up in PATH.
        let separator = |c: &str| c.contains(std::path::MAIN_SEPARATOR);
        if let Some(exec) = user.exec.as_mut()
            && exec.command.as_deref().is_some_and(separator)
        {
            absolute(&mut exec.command);
        }
    }
}
