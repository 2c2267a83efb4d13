//! Each service's command line as the local environment starts it, built from the
//! environment's URLs and directories alone, so what reaches each service is tested without
//! starting one. Every service also gets the cluster's `--kubeconfig` when it is spawned.

use std::{ffi::OsString, path::Path};

use ksim_localenv::environment::state::Urls;

use crate::NAMESPACE;

fn namespace() -> [OsString; 2] {
    ["--namespace".into(), NAMESPACE.into()]
}

/// The tracer keeps its log in `data_dir`.
pub fn tracer(data_dir: &Path) -> Vec<OsString> {
    vec!["--data-dir".into(), data_dir.into()]
}

/// The pool watches the environment's namespace for seats. `node_lease_seconds`: on the
/// embedded plane its node leases match the plane's node lifecycle grace period
/// (`ksim_localenv::tuning`); on a cluster of the user's (`None`) it keeps a kubelet's.
/// `metrics_api`: it serves the metrics API (`kubectl top`, the HPA) on a free port of this
/// machine's own address. `karpenter`: it plays the kubelet for Karpenter's nodes too.
pub fn pool(node_lease_seconds: Option<u32>, metrics_api: bool, karpenter: bool) -> Vec<OsString> {
    let mut args = namespace().to_vec();
    if let Some(seconds) = node_lease_seconds {
        args.extend([
            "--lease-duration-seconds".into(),
            seconds.to_string().into(),
        ]);
    }
    if metrics_api {
        args.extend(["--metrics-api-addr".into(), "0.0.0.0:0".into()]);
    }
    if karpenter {
        args.extend(["--karpenter".into(), "true".into()]);
    }
    args
}

/// The cloud provider, with the user's pricing and group options file if one was given.
pub fn cloudprov(provider_config: Option<&Path>) -> Vec<OsString> {
    provider_config
        .map(|path| vec!["--provider-config".into(), path.into()])
        .unwrap_or_default()
}

/// The driver reaches every other service and the environment API at `urls`, and writes its
/// reports to `report_dir`.
pub fn driver(urls: &Urls, report_dir: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--pool-url".into(),
        urls.pool.clone().into(),
        "--tracer-url".into(),
        urls.tracer.clone().into(),
        "--cloudprov-url".into(),
        urls.cloud_provider.clone().into(),
        "--report-dir".into(),
        report_dir.into(),
        "--environment-url".into(),
        urls.environment.clone().into(),
    ];
    args.extend(namespace());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value after `flag`, if the flag is there once.
    fn value<'a>(args: &'a [OsString], flag: &str) -> Option<&'a str> {
        let at: Vec<usize> = (0..args.len()).filter(|&i| args[i] == flag).collect();
        match at[..] {
            [i] => args.get(i + 1).and_then(|v| v.to_str()),
            _ => None,
        }
    }

    #[test]
    fn the_driver_reaches_each_service_at_its_own_url_in_the_shared_namespace() {
        let urls = Urls {
            tracer: "http://127.0.0.1:20000".to_owned(),
            pool: "http://127.0.0.1:20001".to_owned(),
            cloud_provider: "http://127.0.0.1:20002".to_owned(),
            driver: "http://127.0.0.1:20003".to_owned(),
            environment: "http://127.0.0.1:20004".to_owned(),
        };
        let args = driver(&urls, Path::new("/state/reports"));
        assert_eq!(value(&args, "--tracer-url"), Some("http://127.0.0.1:20000"));
        assert_eq!(value(&args, "--pool-url"), Some("http://127.0.0.1:20001"));
        assert_eq!(
            value(&args, "--cloudprov-url"),
            Some("http://127.0.0.1:20002")
        );
        assert_eq!(
            value(&args, "--environment-url"),
            Some("http://127.0.0.1:20004")
        );
        assert_eq!(value(&args, "--report-dir"), Some("/state/reports"));
        assert_eq!(value(&args, "--namespace"), Some(NAMESPACE));
        assert_eq!(args.len(), 12, "{args:?}");
    }

    #[test]
    fn the_pool_shortens_its_leases_on_the_embedded_plane_and_serves_the_metrics_api_if_asked() {
        let embedded = pool(Some(12), true, false);
        assert_eq!(value(&embedded, "--lease-duration-seconds"), Some("12"));
        assert_eq!(value(&embedded, "--metrics-api-addr"), Some("0.0.0.0:0"));
        assert_eq!(value(&embedded, "--namespace"), Some(NAMESPACE));
        assert_eq!(value(&embedded, "--karpenter"), None);
        let existing = pool(None, false, false);
        assert_eq!(value(&existing, "--lease-duration-seconds"), None);
        assert_eq!(value(&existing, "--metrics-api-addr"), None);
        assert_eq!(value(&existing, "--namespace"), Some(NAMESPACE));
        let karpenter = pool(Some(12), true, true);
        assert_eq!(value(&karpenter, "--karpenter"), Some("true"));
    }

    #[test]
    fn the_provider_gets_a_config_file_only_when_one_is_given() {
        assert!(cloudprov(None).is_empty());
        let given = cloudprov(Some(Path::new("/home/me/prices.yaml")));
        assert_eq!(
            value(&given, "--provider-config"),
            Some("/home/me/prices.yaml")
        );
        assert_eq!(
            tracer(Path::new("/state/tracer")),
            ["--data-dir", "/state/tracer"]
        );
    }
}
