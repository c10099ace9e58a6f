//! The `ExecCredential` documents of `client.authentication.k8s.io`: the one a plugin is
//! given in `KUBERNETES_EXEC_INFO`, and the one it prints.
//!
//! The printed document is read as a [`serde_json::Value`] and its fields picked by hand,
//! so that no error message can quote a value from it, as serde's typed errors would.

use std::time::SystemTime;

use base64::Engine as _;
use serde_json::{Value, json};
use zeroize::{Zeroize as _, Zeroizing};

use super::ExecError;

/// The `apiVersion` of the `ExecCredential` exchanged with the plugin, both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum ApiVersion {
    /// `client.authentication.k8s.io/v1`.
    #[default]
    V1,
    /// `client.authentication.k8s.io/v1beta1`.
    V1Beta1,
}

impl ApiVersion {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V1 => "client.authentication.k8s.io/v1",
            ApiVersion::V1Beta1 => "client.authentication.k8s.io/v1beta1",
        }
    }

    /// The version named `s`, if it is one of the two that Kubernetes still serves
    /// (`v1alpha1` was removed in 1.24).
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn parse(s: &str) -> Option<Self> {
        [ApiVersion::V1, ApiVersion::V1Beta1]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// The `spec.cluster` of `KUBERNETES_EXEC_INFO` with `provideClusterInfo: true`, each field
/// as the kubeconfig names it.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(not(any(test, feature = "kube")), allow(dead_code))]
pub(crate) struct ClusterInfo {
    pub(crate) server: String,
    pub(crate) tls_server_name: Option<String>,
    pub(crate) insecure_skip_tls_verify: bool,
    /// PEM bytes; base64 in the document.
    pub(crate) certificate_authority_data: Option<Vec<u8>>,
    pub(crate) proxy_url: Option<String>,
    pub(crate) disable_compression: bool,
    /// The cluster's `client.authentication.k8s.io/exec` extension, as it is.
    pub(crate) config: Option<Value>,
}

impl ClusterInfo {
    fn to_json(&self) -> Value {
        let ca = (self.certificate_authority_data.as_ref())
            .map(|ca| base64::engine::general_purpose::STANDARD.encode(ca));
        let mut cluster = json!({
            "server": self.server,
            "tls-server-name": self.tls_server_name,
            "insecure-skip-tls-verify": self.insecure_skip_tls_verify.then_some(true),
            "certificate-authority-data": ca,
            "proxy-url": self.proxy_url,
            "disable-compression": self.disable_compression.then_some(true),
            "config": self.config,
        });
        // What is not set is left out, as client-go leaves it out.
        if let Value::Object(fields) = &mut cluster {
            fields.retain(|_, value| !value.is_null());
        }
        cluster
    }
}

/// The `KUBERNETES_EXEC_INFO` document.
pub(super) fn exec_info(
    api_version: ApiVersion,
    interactive: bool,
    cluster: Option<&ClusterInfo>,
) -> String {
    let mut spec = json!({ "interactive": interactive });
    if let Some(cluster) = cluster {
        spec["cluster"] = cluster.to_json();
    }
    json!({
        "kind": "ExecCredential",
        "apiVersion": api_version.as_str(),
        "spec": spec,
    })
    .to_string()
}

/// What a plugin's credential holds, once checked; the token and the key wiped on drop.
pub(super) struct Credential {
    pub(super) token: Option<Zeroizing<String>>,
    /// `clientCertificateData` and `clientKeyData` (PEM), when both are there.
    pub(super) certificate: Option<(String, Zeroizing<String>)>,
    /// Whether either half of a client certificate is there.
    pub(super) has_certificate: bool,
    pub(super) expires_at: Option<SystemTime>,
}

/// Reads a plugin's standard output as an `ExecCredential` of `api_version`, checked in
/// client-go's order.
pub(super) fn parse(
    stdout: &[u8],
    api_version: ApiVersion,
    command: &str,
) -> Result<Credential, ExecError> {
    let command = || command.to_owned();
    let mut doc: Value = serde_json::from_slice(stdout).map_err(|e| ExecError::InvalidJson {
        command: command(),
        // Line and column only: serde_json's syntax errors quote no input.
        reason: e.to_string(),
    })?;
    // The document's strings hold the token and the key: wiped however this returns.
    let doc = Wiped(&mut doc);
    let Value::Object(doc) = &*doc.0 else {
        return Err(ExecError::InvalidJson {
            command: command(),
            reason: "the document is not a JSON object".into(),
        });
    };
    let field = |name: &str| doc.get(name).and_then(Value::as_str).map(shown);
    if doc.get("kind").and_then(Value::as_str) != Some("ExecCredential") {
        return Err(ExecError::WrongKind {
            command: command(),
            found: field("kind"),
        });
    }
    if doc.get("apiVersion").and_then(Value::as_str) != Some(api_version.as_str()) {
        return Err(ExecError::WrongApiVersion {
            command: command(),
            expected: api_version.as_str(),
            found: field("apiVersion"),
        });
    }
    let Some(Value::Object(status)) = doc.get("status") else {
        return Err(ExecError::MissingStatus { command: command() });
    };
    let present = |name: &str| {
        status
            .get(name)
            .filter(|v| !v.is_null() && v.as_str() != Some(""))
    };
    let text = |name: &str| {
        present(name)?
            .as_str()
            .map(|s| Zeroizing::new(s.to_owned()))
    };
    let expires_at = match status.get("expirationTimestamp").filter(|at| !at.is_null()) {
        None => None,
        Some(at) => Some(SystemTime::from(
            (at.as_str()
                .and_then(|at| at.parse::<jiff::Timestamp>().ok()))
            .ok_or_else(|| ExecError::InvalidExpiry { command: command() })?,
        )),
    };
    Ok(Credential {
        token: text("token"),
        certificate: text("clientCertificateData")
            .map(|cert| cert.to_string())
            .zip(text("clientKeyData")),
        has_certificate: present("clientCertificateData")
            .or(present("clientKeyData"))
            .is_some(),
        expires_at,
    })
}

/// A plugin's document, every string of which is wiped when this is dropped.
struct Wiped<'a>(&'a mut Value);

impl Drop for Wiped<'_> {
    fn drop(&mut self) {
        fn wipe(value: &mut Value) {
            match value {
                Value::String(s) => s.zeroize(),
                Value::Array(items) => items.iter_mut().for_each(wipe),
                Value::Object(map) => map.values_mut().for_each(wipe),
                Value::Null | Value::Bool(_) | Value::Number(_) => {}
            }
        }
        wipe(self.0);
    }
}

/// A value from the plugin's output, cut and redacted for an error.
fn shown(value: &str) -> String {
    const MAX: usize = 64;
    let mut value = super::redact::redact(value);
    if value.len() > MAX {
        let cut = (0..=MAX).rev().find(|&i| value.is_char_boundary(i));
        value.truncate(cut.unwrap_or(0));
        value.push('…');
    }
    value
}

#[cfg(test)]
mod tests;
