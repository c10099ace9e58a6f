//! An [`ExecSource`] from a kubeconfig's `exec` section, as kube reads it (feature `kube`).

use ::kube::config::{ExecAuthCluster, ExecConfig, ExecInteractiveMode};

use super::{ApiVersion, ClusterInfo, ExecError, ExecSource, InteractiveMode, redact};

impl TryFrom<&ExecConfig> for ExecSource {
    type Error = ExecError;

    /// The plugin a kubeconfig user's `exec` section describes, with `provideClusterInfo`
    /// the cluster kube's loader put in `cluster`. `interactiveMode` is read as client-go
    /// reads it: required with `v1`, `IfAvailable` when a `v1beta1` section leaves it out.
    ///
    /// # Errors
    ///
    /// [`ExecError::Config`] when there is no command, no or an unknown `apiVersion`, a
    /// `v1` section without `interactiveMode`, an `env` entry without a name, or
    /// `provideClusterInfo` without a cluster.
    ///
    /// # Examples
    ///
    /// ```
    /// use bearer_reload::source::ExecSource;
    /// use kube::config::ExecConfig;
    ///
    /// let exec: ExecConfig = serde_json::from_value(serde_json::json!({
    ///     "apiVersion": "client.authentication.k8s.io/v1beta1",
    ///     "command": "aws",
    ///     "args": ["eks", "get-token", "--cluster-name", "prod"],
    ///     "env": [{"name": "AWS_PROFILE", "value": "prod"}],
    ///     "interactiveMode": "Never",
    /// }))
    /// .unwrap();
    /// let source = ExecSource::try_from(&exec).unwrap();
    /// assert_eq!(source.command(), std::path::Path::new("aws"));
    /// ```
    fn try_from(exec: &ExecConfig) -> Result<Self, ExecError> {
        let command = exec.command.as_deref().unwrap_or_default();
        let problem = |problem: &str| ExecError::Config {
            command: if command.is_empty() {
                "(no command)"
            } else {
                command
            }
            .to_owned(),
            problem: problem.to_owned(),
        };
        if command.is_empty() {
            return Err(problem("the exec section has no command"));
        }
        let supported = format!(
            "(use {} or {})",
            ApiVersion::V1.as_str(),
            ApiVersion::V1Beta1.as_str()
        );
        let api_version = match exec.api_version.as_deref() {
            None | Some("") => {
                return Err(problem(&format!(
                    "the exec section has no apiVersion {supported}"
                )));
            }
            Some(v) => ApiVersion::parse(v).ok_or_else(|| {
                problem(&format!("apiVersion {v:?} is not supported {supported}"))
            })?,
        };
        let interactive = match (&exec.interactive_mode, api_version) {
            (Some(ExecInteractiveMode::Never), _) => InteractiveMode::Never,
            (Some(ExecInteractiveMode::Always), _) => InteractiveMode::Always,
            // client-go's default for v1beta1 only (clientcmd's SetDefaults_ExecConfig).
            (Some(ExecInteractiveMode::IfAvailable), _) | (None, ApiVersion::V1Beta1) => {
                InteractiveMode::IfAvailable
            }
            (None, ApiVersion::V1) => {
                return Err(problem(&format!(
                    "the exec section has no interactiveMode, which {} requires \
                     (Never, IfAvailable or Always)",
                    ApiVersion::V1.as_str()
                )));
            }
        };
        let env = exec.env.iter().flatten().map(|entry| {
            let Some(name) = entry.get("name").filter(|n| !n.is_empty()) else {
                return Err(problem("an env entry has no name"));
            };
            let value = entry.get("value").map(String::as_str).unwrap_or_default();
            Ok((name.into(), value.into()))
        });
        let env: Vec<_> = env.collect::<Result<_, _>>()?;
        let cluster = match (exec.provide_cluster_info, &exec.cluster) {
            (false, _) => None,
            (true, Some(cluster)) => Some(ClusterInfo::from(cluster)),
            (true, None) => {
                return Err(problem(
                    "provideClusterInfo is set but the config holds no cluster info \
                     (build the config with kube's kubeconfig loader)",
                ));
            }
        };
        Ok(ExecSource {
            args: exec.args.iter().flatten().map(Into::into).collect(),
            env,
            drop_env: exec.drop_env.iter().flatten().map(Into::into).collect(),
            api_version,
            interactive,
            install_hint: (exec.install_hint.as_deref())
                .filter(|h| !h.is_empty())
                .map(redact::strip_escapes),
            cluster,
            ..ExecSource::new(command)
        })
    }
}

impl From<&ExecAuthCluster> for ClusterInfo {
    fn from(cluster: &ExecAuthCluster) -> Self {
        ClusterInfo {
            server: cluster.server.clone().unwrap_or_default(),
            tls_server_name: cluster.tls_server_name.clone(),
            insecure_skip_tls_verify: cluster.insecure_skip_tls_verify.unwrap_or(false),
            certificate_authority_data: cluster.certificate_authority_data.clone(),
            proxy_url: cluster.proxy_url.clone(),
            disable_compression: false,
            config: cluster.config.clone(),
        }
    }
}
