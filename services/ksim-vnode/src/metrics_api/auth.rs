//! Who calls and what they may do, decided as an aggregated apiserver decides it: the caller
//! is the apiserver's front proxy (a client certificate of the requestheader CA with an
//! allowed name) speaking for the user in its `X-Remote-*` headers, and the apiserver itself
//! answers, through a SubjectAccessReview, whether that user may read the metrics.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Mutex,
    time::{Duration, Instant},
};

use http::HeaderMap;
use k8s_openapi::api::{
    authorization::v1::{
        NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    },
    core::v1::ConfigMap,
};
use kube::{Api, Client, api::PostParams};
use rustls::pki_types::CertificateDer;

use crate::domain::metrics_api::{Access, GROUP};
use crate::tls::{ClientCa, TlsError, common_name};

/// Where the apiserver publishes its front proxy's CA and header names for extension servers.
pub const AUTH_NAMESPACE: &str = "kube-system";
pub const AUTH_CONFIG_MAP: &str = "extension-apiserver-authentication";
const AUTHENTICATED: &str = "system:authenticated";
/// Most groups and extra values one request may assert.
const MAX_GROUPS: usize = 256;
const MAX_EXTRA: usize = 64;
/// How long a decision is reused, allowed or denied: the delegating authorizer's defaults.
const DECISION_TTL: Duration = Duration::from_secs(10);
/// Most decisions kept at once.
const MAX_DECISIONS: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    #[error(
        "ConfigMap {AUTH_NAMESPACE}/{AUTH_CONFIG_MAP} has no requestheader-client-ca-file: the \
         apiserver runs without --requestheader-client-ca-file, so no aggregation layer can \
         call the metrics API"
    )]
    NoRequestHeaderCa,
    #[error("ConfigMap {AUTH_NAMESPACE}/{AUTH_CONFIG_MAP}: {key} is not a JSON list of strings")]
    BadList { key: &'static str },
    #[error("ConfigMap {AUTH_NAMESPACE}/{AUTH_CONFIG_MAP}: {0}")]
    Ca(#[from] TlsError),
    #[error("reading ConfigMap {AUTH_NAMESPACE}/{AUTH_CONFIG_MAP}: {0}")]
    Kube(#[from] kube::Error),
}

/// A user as the front proxy asserts it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The front proxy's trust settings, as the apiserver published them.
#[derive(Debug, Clone)]
pub struct FrontProxy {
    pub ca: ClientCa,
    allowed_names: Vec<String>,
    username_headers: Vec<String>,
    group_headers: Vec<String>,
    extra_prefixes: Vec<String>,
}

impl FrontProxy {
    pub async fn load(client: &Client) -> Result<Self, AuthConfigError> {
        let config_map = Api::<ConfigMap>::namespaced(client.clone(), AUTH_NAMESPACE)
            .get(AUTH_CONFIG_MAP)
            .await?;
        Self::from_data(&config_map.data.unwrap_or_default())
    }

    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Self, AuthConfigError> {
        let ca = data
            .get("requestheader-client-ca-file")
            .filter(|pem| !pem.trim().is_empty())
            .ok_or(AuthConfigError::NoRequestHeaderCa)?;
        let list = |key: &'static str, default: &[&str]| -> Result<Vec<String>, AuthConfigError> {
            match data.get(key) {
                None => Ok(default.iter().map(|s| (*s).to_owned()).collect()),
                Some(json) => serde_json::from_str::<Option<Vec<String>>>(json)
                    .map(Option::unwrap_or_default)
                    .map_err(|_| AuthConfigError::BadList { key }),
            }
        };
        let lower =
            |names: Vec<String>| names.into_iter().map(|n| n.to_ascii_lowercase()).collect();
        Ok(Self {
            ca: ClientCa::from_pem(ca)?,
            allowed_names: list("requestheader-allowed-names", &[])?,
            username_headers: lower(list("requestheader-username-headers", &["X-Remote-User"])?),
            group_headers: lower(list("requestheader-group-headers", &["X-Remote-Group"])?),
            extra_prefixes: lower(list(
                "requestheader-extra-headers-prefix",
                &["X-Remote-Extra-"],
            )?),
        })
    }

    /// Whether a connection's client certificate makes it the front proxy: signed by the CA
    /// and, when names are listed, with one of them as its common name.
    pub fn check_certificate(&self, chain: Option<&[CertificateDer<'_>]>) -> Result<(), String> {
        let chain = chain.unwrap_or_default();
        self.ca.verify(chain)?;
        if self.allowed_names.is_empty() {
            return Ok(());
        }
        let name = chain.first().and_then(common_name).unwrap_or_default();
        if self.allowed_names.contains(&name) {
            Ok(())
        } else {
            Err(format!(
                "client certificate name {name:?} is not one of the allowed front-proxy names"
            ))
        }
    }

    /// The user a front-proxy request speaks for.
    pub fn user(&self, headers: &HeaderMap) -> Result<User, String> {
        let text = |value: &http::HeaderValue| value.to_str().map(str::to_owned).ok();
        let name = self
            .username_headers
            .iter()
            .find_map(|header| headers.get(header).and_then(text))
            .filter(|name| !name.is_empty())
            .ok_or_else(|| "the request names no user".to_owned())?;
        let mut groups: Vec<String> = self
            .group_headers
            .iter()
            .flat_map(|header| headers.get_all(header).iter().filter_map(text))
            .take(MAX_GROUPS + 1)
            .collect();
        if groups.len() > MAX_GROUPS {
            return Err(format!("more than {MAX_GROUPS} groups"));
        }
        // Every authenticated user is in this group, as the apiserver's own authenticators
        // add it; discovery is granted to it (system:discovery), and the aggregator's
        // discovery requests name no group of their own.
        if !groups.iter().any(|group| group == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut count = 0;
        for (header, value) in headers {
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|prefix| header.as_str().strip_prefix(prefix.as_str()))
            else {
                continue;
            };
            count += 1;
            if count > MAX_EXTRA {
                return Err(format!("more than {MAX_EXTRA} extra values"));
            }
            if let Some(value) = text(value) {
                extra.entry(unescape(key)).or_default().push(value);
            }
        }
        Ok(User {
            name,
            groups,
            extra,
        })
    }
}

/// Extra keys travel percent-encoded in header names (`X-Remote-Extra-Scopes%2Fa`).
fn unescape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// SubjectAccessReviews, their decisions reused for a few seconds.
pub struct Authorizer {
    client: Client,
    decisions: Mutex<HashMap<(User, String), (bool, Instant)>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            decisions: Mutex::new(HashMap::new()),
        }
    }

    pub async fn allowed(&self, user: &User, access: &Access) -> Result<bool, kube::Error> {
        let key = (user.clone(), format!("{access:?}"));
        let now = Instant::now();
        if let Some((allowed, at)) = self.lock().get(&key)
            && now.duration_since(*at) < DECISION_TTL
        {
            return Ok(*allowed);
        }
        let review = review(user, access);
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let allowed = answer.status.is_some_and(|status| status.allowed);
        let mut decisions = self.lock();
        if decisions.len() >= MAX_DECISIONS {
            decisions.retain(|_, (_, at)| now.duration_since(*at) < DECISION_TTL);
            if decisions.len() >= MAX_DECISIONS {
                decisions.clear();
            }
        }
        decisions.insert(key, (allowed, now));
        Ok(allowed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(User, String), (bool, Instant)>> {
        // A panic while holding the map leaves nothing half-written worth refusing.
        self.decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The review the apiserver's own authorizer would make of `user` doing `access`.
pub fn review(user: &User, access: &Access) -> SubjectAccessReview {
    let (resource_attributes, non_resource_attributes) = match access {
        Access::Resource {
            verb,
            resource,
            namespace,
            name,
        } => (
            Some(ResourceAttributes {
                group: Some(GROUP.to_owned()),
                version: Some(crate::domain::metrics_api::VERSION.to_owned()),
                resource: Some(resource.name().to_owned()),
                verb: Some((*verb).to_owned()),
                namespace: namespace.clone(),
                name: name.clone(),
                ..ResourceAttributes::default()
            }),
            None,
        ),
        Access::NonResource { path } => (
            None,
            Some(NonResourceAttributes {
                path: Some(path.clone()),
                verb: Some("get".to_owned()),
            }),
        ),
        Access::Anyone => (None, None),
    };
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            resource_attributes,
            non_resource_attributes,
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::domain::metrics_api::Resource;

    fn proxy(extra: &[(&str, &str)]) -> Result<FrontProxy, AuthConfigError> {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = ca.self_signed(&ca_key).unwrap().pem();
        let mut data: BTreeMap<String, String> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        data.insert("requestheader-client-ca-file".into(), pem);
        FrontProxy::from_data(&data)
    }

    #[test]
    fn the_user_comes_from_the_configured_headers() {
        let proxy = proxy(&[("requestheader-group-headers", r#"["X-Remote-Group"]"#)]).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "jane".parse().unwrap());
        headers.append("x-remote-group", "devs".parse().unwrap());
        headers.append("x-remote-group", "system:authenticated".parse().unwrap());
        headers.insert("x-remote-extra-scopes%2fa", "read".parse().unwrap());
        let user = proxy.user(&headers).unwrap();
        assert_eq!(user.name, "jane");
        assert_eq!(user.groups, ["devs", "system:authenticated"]);
        assert_eq!(user.extra["scopes/a"], ["read"]);
        headers.remove("x-remote-group");
        assert_eq!(
            proxy.user(&headers).unwrap().groups,
            ["system:authenticated"]
        );
        assert!(proxy.user(&HeaderMap::new()).is_err());
    }

    #[test]
    fn a_configuration_without_the_ca_or_with_bad_lists_is_refused() {
        assert!(matches!(
            FrontProxy::from_data(&BTreeMap::new()),
            Err(AuthConfigError::NoRequestHeaderCa)
        ));
        assert!(matches!(
            proxy(&[("requestheader-allowed-names", "front-proxy-client")]),
            Err(AuthConfigError::BadList { .. })
        ));
    }

    #[test]
    fn a_missing_certificate_is_refused() {
        let proxy = proxy(&[]).unwrap();
        assert!(proxy.check_certificate(None).is_err());
    }

    #[test]
    fn reviews_ask_for_the_metrics_resource_or_the_discovery_path() {
        let user = User {
            name: "jane".into(),
            groups: vec!["devs".into()],
            extra: BTreeMap::new(),
        };
        let list = review(
            &user,
            &Access::Resource {
                verb: "list",
                resource: Resource::Pods,
                namespace: Some("shop".into()),
                name: None,
            },
        );
        let attributes = list.spec.resource_attributes.unwrap();
        assert_eq!(attributes.group.as_deref(), Some("metrics.k8s.io"));
        assert_eq!(attributes.resource.as_deref(), Some("pods"));
        assert_eq!(attributes.verb.as_deref(), Some("list"));
        assert_eq!(attributes.namespace.as_deref(), Some("shop"));
        assert_eq!(list.spec.user.as_deref(), Some("jane"));
        let discovery = review(
            &user,
            &Access::NonResource {
                path: "/apis".into(),
            },
        );
        assert_eq!(
            discovery
                .spec
                .non_resource_attributes
                .unwrap()
                .path
                .as_deref(),
            Some("/apis")
        );
    }
}
