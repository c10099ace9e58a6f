use super::*;

fn in_use(auth: &AuthInfo) -> &'static str {
    auth_in_use(auth).name()
}

#[test]
fn kubes_precedence_decides_which_auth_is_used() {
    let file = AuthInfo {
        token_file: Some("/t".into()),
        ..Default::default()
    };
    assert!(matches!(auth_in_use(&file), AuthInUse::TokenFile("/t")));
    let inline = AuthInfo {
        token: Some("x".to_string().into()),
        ..file.clone()
    };
    assert_eq!(in_use(&inline), "inline token");
    let basic = AuthInfo {
        username: Some("u".into()),
        password: Some("p".to_string().into()),
        ..file.clone()
    };
    assert_eq!(in_use(&basic), "username and password");
    let user_only = AuthInfo {
        username: Some("u".into()),
        ..file.clone()
    };
    assert!(matches!(
        auth_in_use(&user_only),
        AuthInUse::TokenFile("/t")
    ));
    assert_eq!(in_use(&AuthInfo::default()), "none");

    // An exec plugin is used only when nothing before it is set: a token file wins.
    let exec = ExecConfig {
        command: Some("aws".into()),
        ..ExecConfig::default()
    };
    let plugin = AuthInfo {
        exec: Some(exec.clone()),
        client_certificate_data: Some("cert".into()),
        ..AuthInfo::default()
    };
    assert!(matches!(auth_in_use(&plugin), AuthInUse::Exec(e) if e.command == exec.command));
    let both = AuthInfo {
        token_file: Some("/t".into()),
        ..plugin.clone()
    };
    assert!(matches!(auth_in_use(&both), AuthInUse::TokenFile("/t")));
    let cert = AuthInfo {
        exec: None,
        ..plugin
    };
    assert_eq!(in_use(&cert), "client certificate");
}

#[test]
fn infer_watches_the_current_clusters_ca_file_unless_it_has_data() {
    let kubeconfig = |cluster: &str| {
        Kubeconfig::from_yaml(&format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: x\n\
             contexts: [{{name: x, context: {{cluster: b, user: u}}}}, \
             {{name: y, context: {{cluster: a, user: u}}}}]\n\
             clusters: [{{name: a, cluster: {{server: 'https://a', certificate-authority: /a/ca.crt}}}}, \
             {{name: b, cluster: {cluster}}}]\n"
        ))
        .unwrap()
    };
    let current = KubeConfigOptions::default();
    let file = kubeconfig("{server: 'https://b', certificate-authority: /b/ca.crt}");
    assert_eq!(ca_file(&file, &current), Some(PathBuf::from("/b/ca.crt")));
    // The chosen context's, or the chosen cluster's.
    let context_y = KubeConfigOptions {
        context: Some("y".into()),
        ..KubeConfigOptions::default()
    };
    assert_eq!(ca_file(&file, &context_y), Some(PathBuf::from("/a/ca.crt")));
    let cluster_a = KubeConfigOptions {
        cluster: Some("a".into()),
        ..KubeConfigOptions::default()
    };
    assert_eq!(ca_file(&file, &cluster_a), Some(PathBuf::from("/a/ca.crt")));
    // kube uses the data first: nothing to watch.
    let data = kubeconfig(
        "{server: 'https://b', certificate-authority: /b/ca.crt, certificate-authority-data: eA==}",
    );
    assert_eq!(ca_file(&data, &current), None);
    let none = kubeconfig("{server: 'https://b'}");
    assert_eq!(ca_file(&none, &current), None);
}

#[test]
fn errors_hold_no_token() {
    let err = Error::from(LoadError::Timeout {
        origin: "file /d/token".into(),
        after: std::time::Duration::from_secs(10),
    });
    assert_eq!(
        err.to_string(),
        "fetching from file /d/token took longer than 10s"
    );
}

#[test]
fn only_a_token_file_or_a_plugin_gets_a_store() {
    let config = |auth_info: AuthInfo| {
        let mut config = Config::new("https://10.0.0.1".parse().unwrap());
        config.auth_info = auth_info;
        config
    };
    let file = config(AuthInfo {
        token_file: Some("/run/token".into()),
        ..AuthInfo::default()
    });
    let shown = format!(
        "{:?}",
        Credentials::token_store_builder(&file).unwrap().unwrap()
    );
    assert!(shown.contains("file /run/token"), "{shown}");
    let exec = config(AuthInfo {
        exec: Some(ExecConfig {
            command: Some("aws".into()),
            api_version: Some("client.authentication.k8s.io/v1".into()),
            interactive_mode: Some(::kube::config::ExecInteractiveMode::Never),
            ..ExecConfig::default()
        }),
        ..AuthInfo::default()
    });
    let shown = format!(
        "{:?}",
        Credentials::token_store_builder(&exec).unwrap().unwrap()
    );
    assert!(shown.contains("exec plugin aws"), "{shown}");
    let inline = config(AuthInfo {
        token: Some("x".to_string().into()),
        ..AuthInfo::default()
    });
    assert!(Credentials::token_store_builder(&inline).unwrap().is_none());
    let broken = config(AuthInfo {
        exec: Some(ExecConfig::default()),
        ..AuthInfo::default()
    });
    assert!(matches!(
        Credentials::token_store_builder(&broken),
        Err(Error::Exec(_))
    ));
}
