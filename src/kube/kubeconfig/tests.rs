use super::part::Part;
use super::read::*;
use super::snapshot::*;
use super::*;
use crate::source::Trigger;
use crate::store::Credential;
use ::kube::config::Kubeconfig;

/// A kubeconfig of two contexts, `a` (current: cluster `one`, user `alice` with an inline
/// token) and `b` (cluster `two`, user `bob` with a token file).
fn two_contexts(token: &str, server: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Config
clusters:
- name: one
  cluster:
    server: {server}
- name: two
  cluster:
    server: https://two.example:6443
users:
- name: alice
  user:
    token: {token}
- name: bob
  user:
    tokenFile: bob.token
contexts:
- name: a
  context: {{cluster: one, user: alice}}
- name: b
  context: {{cluster: two, user: bob}}
current-context: a
"#
    )
}

/// A kubeconfig of one context, `x`, of cluster `c` and user `u` (each given as YAML).
fn one_context(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {cluster}}}]\n\
         users: [{{name: u, user: {user}}}]\n\
         contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
    )
}

fn selection(context: Option<&str>) -> KubeConfigOptions {
    KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    }
}

fn shape_of(text: &str, context: Option<&str>) -> Shape {
    let (_, selected) = select(text.as_bytes(), &selection(context)).unwrap();
    snapshot(&selected, SystemTime::now()).unwrap().shape
}

#[test]
fn the_current_context_unless_one_is_chosen_as_kube_chooses() {
    let text = two_contexts("t1", "https://one.example:6443");
    let (_, current) = select(text.as_bytes(), &selection(None)).unwrap();
    assert_eq!(
        (current.context.as_str(), current.cluster_name.as_str()),
        ("a", "one")
    );
    assert_eq!(current.user_name, "alice");
    let (_, chosen) = select(text.as_bytes(), &selection(Some("b"))).unwrap();
    assert_eq!(chosen.user.token_file.as_deref(), Some("bob.token"));
    // kube's overrides of the context's cluster and user.
    let overridden = KubeConfigOptions {
        context: Some("a".into()),
        cluster: Some("two".into()),
        user: Some("bob".into()),
    };
    let (_, mixed) = select(text.as_bytes(), &overridden).unwrap();
    assert_eq!(
        (mixed.cluster_name.as_str(), mixed.user_name.as_str()),
        ("two", "bob")
    );
    // A user that is not there is no user, as kube and client-go read it.
    let missing = KubeConfigOptions {
        user: Some("carol".into()),
        ..KubeConfigOptions::default()
    };
    let (_, nobody) = select(text.as_bytes(), &missing).unwrap();
    assert!(nobody.user.token.is_none() && nobody.user.token_file.is_none());
}

#[test]
fn what_cannot_be_used_is_said_with_where_and_never_the_secret() {
    let text = two_contexts("hunter2", "https://one.example:6443");
    let cases: [(String, KubeConfigOptions, &str); 5] = [
        (text.clone(), selection(Some("c")), "has no context \"c\""),
        (
            text.replace("current-context: a", ""),
            selection(None),
            "sets no current-context",
        ),
        (
            text.replace("- name: one\n", "- name: uno\n"),
            selection(None),
            "has no cluster \"one\" (of context \"a\")",
        ),
        // An unclosed flow sequence right after the token: the YAML error is reduced to
        // where it is.
        (
            text.replace("token: hunter2", "token: [hunter2"),
            selection(None),
            "does not parse as a kubeconfig (line",
        ),
        (String::from("  \n"), selection(None), "is empty"),
    ];
    for (text, selection, says) in cases {
        let problem = match select(text.as_bytes(), &selection) {
            Err(problem) => problem,
            Ok(_) => panic!("{says}: parsed"),
        };
        let shown = problem.to_string();
        assert!(shown.contains(says), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
    let (_, selected) = select(
        two_contexts("not a token", "https://x").as_bytes(),
        &selection(None),
    )
    .unwrap();
    let Err(problem) = snapshot(&selected, SystemTime::now()) else {
        panic!("a token with spaces was taken");
    };
    assert!(problem.to_string().contains("the token of user alice"));
}

#[test]
fn the_inline_token_is_the_file_s_only_when_kube_would_use_it() {
    let token = |user: &str| {
        shape_of(&one_context("{server: https://c}", user), None)
            .inline
            .token
    };
    assert!(token("{token: t}"));
    // Before it in kube's order: username and password, an auth provider.
    assert!(!token("{token: t, username: u, password: p}"));
    assert!(!token("{token: t, auth-provider: {name: oidc}}"));
    // After it: a token file is not used while the inline token is.
    assert!(token("{token: t, tokenFile: /t}"));
    assert!(!token("{tokenFile: /t}"));
}

#[test]
fn a_new_token_is_the_same_shape_and_anything_else_is_a_change_said_in_words() {
    let first = shape_of(&two_contexts("t1", "https://one.example:6443"), None);
    assert_eq!(
        shape_of(&two_contexts("t2", "https://one.example:6443"), None).change_from(&first),
        None
    );
    let moved = shape_of(&two_contexts("t2", "https://uno.example:6443"), None);
    assert_eq!(
        moved.change_from(&first).unwrap(),
        "the server of cluster \"one\" changed from https://one.example:6443 to \
         https://uno.example:6443"
    );
    // The current context moved to another cluster and user.
    let other = two_contexts("t1", "https://one.example:6443")
        .replace("current-context: a", "current-context: b");
    let shape = shape_of(&other, None);
    assert!(
        shape
            .change_from(&first)
            .unwrap()
            .contains("context \"b\" now names cluster \"two\" and user \"bob\"")
    );
    // The same cluster with another user.
    let other_user = two_contexts("t1", "https://one.example:6443")
        .replace(
            "context: {cluster: two, user: bob}",
            "context: {cluster: one, user: bob}",
        )
        .replace("current-context: a", "current-context: b");
    assert!(
        shape_of(&other_user, None)
            .change_from(&first)
            .unwrap()
            .contains("context \"b\" now names cluster \"one\" and user \"bob\"")
    );
    // Another setting of the user (a token file beside the token): its digest changes.
    let with_file = two_contexts("t1", "https://one.example:6443")
        .replace("    token: t1", "    token: t1\n    tokenFile: /t");
    assert!(
        shape_of(&with_file, None)
            .change_from(&first)
            .unwrap()
            .contains("other than their inline credentials")
    );
    // The token gone: the inline credentials changed.
    let without = two_contexts("t1", "https://one.example:6443").replace("    token: t1", "    {}");
    assert!(
        shape_of(&without, None)
            .change_from(&first)
            .unwrap()
            .contains("which credentials of context \"a\" are inline changed")
    );
}

#[test]
fn the_same_credentials_read_again_are_no_rotation() {
    let read = |token: &str| {
        let (_, selected) = select(
            two_contexts(token, "https://one.example").as_bytes(),
            &selection(None),
        )
        .unwrap();
        snapshot(&selected, SystemTime::now()).unwrap()
    };
    assert!(read("t1").same(&read("t1")));
    assert!(!read("t1").same(&read("t2")));
    // Shown without the token: by a fingerprint of the credentials, which tells them apart.
    let shown = read("hunter2").to_string();
    let fingerprint = shown
        .strip_prefix("kubeconfig context \"a\" (https://one.example, credentials ")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(fingerprint.len() == 8 && fingerprint.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(fingerprint, read("hunter2").fingerprint());
    assert_ne!(fingerprint, read("t1").fingerprint());
    assert!(!shown.contains("hunter2"));
    // Its own jitter's seed, the same for the same credentials.
    assert_eq!(read("t1").seed(), read("t1").seed());
    assert_ne!(read("t1").seed(), read("t2").seed());
    // The store's stamp is kept.
    let stamp = crate::store::Stamp {
        generation: 7,
        ..crate::store::Stamp::default()
    };
    assert_eq!(read("t1").stamped(stamp).stamp(), &stamp);
}

#[test]
fn relative_paths_are_the_file_s_directory_s_as_kube_reads_them() {
    let text = two_contexts("t", "https://one.example").replace(
        "    tokenFile: bob.token",
        "    tokenFile: bob.token\n    client-certificate: /abs/c.crt\n    \
         exec: {command: ./bin/plugin, apiVersion: client.authentication.k8s.io/v1}",
    );
    let mut kubeconfig = Kubeconfig::from_yaml(&text).unwrap();
    absolute_paths(&mut kubeconfig, Path::new("/etc/clusters/prod/value"));
    let bob = kubeconfig.auth_infos[1].auth_info.as_ref().unwrap();
    assert_eq!(
        bob.token_file.as_deref(),
        Some("/etc/clusters/prod/bob.token")
    );
    assert_eq!(bob.client_certificate.as_deref(), Some("/abs/c.crt"));
    let command = bob.exec.as_ref().unwrap().command.as_deref();
    assert_eq!(command, Some("/etc/clusters/prod/./bin/plugin"));
}

#[test]
fn a_part_reads_the_file_again_unless_the_file_s_store_just_read_it() {
    assert!(!Part::reads_file(Trigger::Load));
    assert!(!Part::reads_file(Trigger::Watch));
    assert!(Part::reads_file(Trigger::Unauthorized));
    assert!(Part::reads_file(Trigger::Call));
    assert!(Part::reads_file(Trigger::Timer));
}

/// A client certificate and a CA bundle inline are the file's to rotate only where kube
/// uses them: both halves of the identity, and a cluster that is verified (feature `tls`),
/// through a proxy or not.
#[test]
fn inline_certificates_are_the_file_s_only_when_kube_would_use_them() {
    let inline = |cluster: &str, user: &str| {
        let text = one_context(cluster, user);
        let (_, selected) = select(text.as_bytes(), &selection(None)).unwrap();
        Inline::of(&selected)
    };
    let both = "{client-certificate-data: Y2VydA==, client-key-data: a2V5}";
    let verified = "{server: https://c, certificate-authority-data: Y2E=}";
    let tls = cfg!(feature = "tls");

    let all = inline(verified, both);
    assert_eq!((all.identity, all.roots, all.any()), (tls, tls, tls));
    // One half of an identity is none.
    let cert_only = inline(verified, "{client-certificate-data: Y2VydA==}");
    assert!(!cert_only.identity);
    let key_only = inline(verified, "{client-key-data: a2V5}");
    assert!(!key_only.identity);
    // Through a proxy, the crate's as well.
    let proxied = "{server: https://c, certificate-authority-data: Y2E=, proxy-url: http://p:3128}";
    let proxied = inline(proxied, both);
    assert_eq!((proxied.identity, proxied.roots), (tls, tls));
    // Unverified, kube's TLS is not the crate's to rotate.
    let unverified =
        "{server: https://c, certificate-authority-data: Y2E=, insecure-skip-tls-verify: true}";
    let away = inline(unverified, both);
    assert_eq!(
        (away.identity, away.roots, away.any()),
        (false, false, false)
    );
    // Each credential alone makes the file hold something inline.
    let roots_only = inline(verified, "{tokenFile: /t}");
    assert_eq!((roots_only.roots, roots_only.any()), (tls, tls));
    let token_only = inline("{server: https://c}", "{token: t}");
    assert!(token_only.any());
    assert!(!inline("{server: https://c}", "{tokenFile: /t}").any());
}

/// Inline certificates are checked with the rest of the file: data that is no identity or
/// no bundle is the file's problem, named by its user or cluster.
#[cfg(feature = "tls")]
#[test]
fn inline_data_that_is_no_certificate_is_the_file_s_problem() {
    let cases = [
        (
            "{server: https://c, certificate-authority-data: Y2E=}",
            "{token: t}",
            "certificate-authority-data of cluster c is not a CA bundle",
        ),
        (
            "{server: https://c}",
            "{client-certificate-data: Y2VydA==, client-key-data: a2V5}",
            "client-certificate-data and client-key-data of user u are not a client identity",
        ),
    ];
    for (cluster, user, says) in cases {
        let text = one_context(cluster, user);
        let (_, selected) = select(text.as_bytes(), &selection(None)).unwrap();
        let Err(problem) = snapshot(&selected, SystemTime::now()) else {
            panic!("{says}: taken");
        };
        assert_eq!(problem.to_string(), says);
    }
}

/// A kubeconfig is a file: watched, with the file's timer behind the watch, and its paths
/// the file's.
#[test]
fn a_kubeconfig_is_watched_and_timed_as_a_file() {
    use crate::source::{FileSource, TokenSource};
    let path = std::path::Path::new("/etc/kubeconfig");
    let text = two_contexts("t1", "https://one.example:6443");
    let source = KubeconfigSource::new(path, selection(None), shape_of(&text, None));
    let file = FileSource::new(path);
    assert_eq!(
        source.default_refresh_interval(),
        file.default_refresh_interval()
    );
    assert!(source.default_refresh_interval().is_some());
    assert_eq!(source.paths(), file.paths());
}

/// What kube does not use of the file is not read: a token behind a username and password,
/// certificates of a cluster that is not verified, may be anything.
#[test]
fn credentials_kube_does_not_use_are_not_read() {
    let snap = |cluster: &str, user: &str| {
        let text = one_context(cluster, user);
        let (_, selected) = select(text.as_bytes(), &selection(None)).unwrap();
        snapshot(&selected, SystemTime::now()).map(|s| s.shape.inline)
    };
    let basic = "{token: not a token, username: u, password: p}";
    assert!(!snap("{server: https://c}", basic).unwrap().token);
    let unverified =
        "{server: https://c, insecure-skip-tls-verify: true, certificate-authority-data: '!!'}";
    let garbage = "{client-certificate-data: '!!', client-key-data: '!!'}";
    assert!(!snap(unverified, garbage).unwrap().any());
    // Used, the same garbage is an error.
    assert!(snap("{server: https://c}", "{token: not a token}").is_err());
    if cfg!(feature = "tls") {
        let verified = "{server: https://c, certificate-authority-data: '!!'}";
        assert!(snap(verified, "{token: t}").is_err());
        assert!(snap("{server: https://c}", garbage).is_err());
    }
}
