//! The resource metrics API (`metrics.k8s.io/v1beta1`) as metrics-server serves it: which
//! request a path and query name, what the caller must be allowed to do, and the JSON answer
//! built from the pool's usage readings. No I/O: the time is passed in.
//!
//! Figures are printed as metrics-server prints them (Kubernetes quantities in canonical form:
//! CPU from nanocores in DecimalSI, memory working set in BinarySI), so `kubectl top` and the
//! HPA read exactly what they would read from metrics-server.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::jiff::Timestamp;
use kube::core::{Expression, Selector, SelectorExt};
use serde_json::{Value, json};

use crate::domain::usage::ContainerReading;

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";
pub const GROUP_VERSION: &str = "metrics.k8s.io/v1beta1";
/// `<version>.<group>`: the APIService name.
pub const API_SERVICE: &str = "v1beta1.metrics.k8s.io";
/// metrics-server's release manifest scrapes every 15 s, so its window is 15 s.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(15);
/// Longest path and query read; longer requests are refused before they are parsed.
pub const MAX_PATH_LEN: usize = 1024;
pub const MAX_QUERY_LEN: usize = 8192;
/// Most requirements one selector holds, and most values one `in` set holds.
const MAX_REQUIREMENTS: usize = 64;
const MAX_VALUES: usize = 256;
/// Longest object name (a DNS subdomain) and label key or value part.
const MAX_NAME_LEN: usize = 253;
const MAX_LABEL_VALUE_LEN: usize = 63;

/// The two resources the API serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Nodes,
    Pods,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Self::Nodes => "nodes",
            Self::Pods => "pods",
        }
    }

    /// The name errors use, as metrics-server's storage names its resources.
    fn qualified(self) -> &'static str {
        match self {
            Self::Nodes => "nodemetrics.metrics.k8s.io",
            Self::Pods => "podmetrics.metrics.k8s.io",
        }
    }
}

/// A field requirement of a `fieldSelector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: Field,
    pub value: String,
    pub equal: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Name,
    Namespace,
}

/// What a list keeps: its label and field selectors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub labels: Selector,
    pub fields: Vec<FieldRequirement>,
}

impl Filter {
    fn keeps(&self, namespace: &str, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.labels.matches(labels)
            && self.fields.iter().all(|requirement| {
                let actual = match requirement.field {
                    Field::Name => name,
                    Field::Namespace => namespace,
                };
                (actual == requirement.value) == requirement.equal
            })
    }
}

/// A request the API answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `/healthz`, `/livez`, `/readyz`: open to anyone, as metrics-server's are.
    Health,
    /// `/apis`
    GroupList,
    /// `/apis/metrics.k8s.io`
    Group,
    /// `/apis/metrics.k8s.io/v1beta1`
    ResourceList,
    /// `/openapi/v2` and `/openapi/v3`, which the aggregator merges into its own: empty
    /// documents (no schemas are published), so its downloads succeed.
    OpenApi { v3: bool },
    List {
        resource: Resource,
        namespace: Option<String>,
        filter: Filter,
    },
    Get {
        resource: Resource,
        namespace: Option<String>,
        name: String,
    },
}

/// What the caller must be allowed, as the apiserver's authorizer would ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    Anyone,
    NonResource {
        path: String,
    },
    Resource {
        verb: &'static str,
        resource: Resource,
        namespace: Option<String>,
        name: Option<String>,
    },
}

impl Request {
    pub fn access(&self, path: &str) -> Access {
        match self {
            Self::Health => Access::Anyone,
            Self::GroupList | Self::Group | Self::ResourceList | Self::OpenApi { .. } => {
                Access::NonResource {
                    path: path.to_owned(),
                }
            }
            Self::List {
                resource,
                namespace,
                ..
            } => Access::Resource {
                verb: "list",
                resource: *resource,
                namespace: namespace.clone(),
                name: None,
            },
            Self::Get {
                resource,
                namespace,
                name,
            } => Access::Resource {
                verb: "get",
                resource: *resource,
                namespace: namespace.clone(),
                name: Some(name.clone()),
            },
        }
    }
}

/// An answer: an HTTP status and its JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub code: u16,
    pub body: Value,
}

impl Reply {
    fn ok(body: Value) -> Self {
        Self { code: 200, body }
    }

    /// A `Status` failure, as every Kubernetes API server reports one.
    pub fn status(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            body: json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": message.into(),
                "reason": reason,
                "code": code,
            }),
        }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::status(401, "Unauthorized", message)
    }

    /// The apiserver's wording for a refused request.
    pub fn forbidden(user: &str, access: &Access) -> Self {
        let message = match access {
            Access::Resource {
                verb,
                resource,
                namespace,
                ..
            } => {
                let scope = match namespace {
                    Some(namespace) => format!("in the namespace \"{namespace}\""),
                    None => "at the cluster scope".to_owned(),
                };
                format!(
                    "{} is forbidden: User \"{user}\" cannot {verb} resource \"{}\" in API group \"{GROUP}\" {scope}",
                    resource.qualified(),
                    resource.name()
                )
            }
            Access::NonResource { path } => {
                format!("forbidden: User \"{user}\" cannot get path \"{path}\"")
            }
            Access::Anyone => "forbidden".to_owned(),
        };
        Self::status(403, "Forbidden", message)
    }

    pub fn method_not_allowed(method: &str) -> Self {
        Self::status(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported: the metrics API is read-only"),
        )
    }

    fn not_found(resource: Resource, name: &str) -> Self {
        Self::status(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", resource.qualified()),
        )
    }
}

/// Why a path or query names no request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("the server could not find the requested resource")]
    NotFound,
    #[error("{0}")]
    BadRequest(String),
}

impl From<RouteError> for Reply {
    fn from(error: RouteError) -> Self {
        match error {
            RouteError::NotFound => Reply::status(404, "NotFound", error.to_string()),
            RouteError::BadRequest(message) => Reply::status(400, "BadRequest", message),
        }
    }
}

fn bad(message: impl Into<String>) -> RouteError {
    RouteError::BadRequest(message.into())
}

/// The request `path` and `query` (without `?`) name; both untrusted.
pub fn route(path: &str, query: Option<&str>) -> Result<Request, RouteError> {
    if path.len() > MAX_PATH_LEN {
        return Err(bad(format!("path longer than {MAX_PATH_LEN} bytes")));
    }
    let query = query.unwrap_or("");
    if query.len() > MAX_QUERY_LEN {
        return Err(bad(format!("query longer than {MAX_QUERY_LEN} bytes")));
    }
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    let segments: Vec<&str> = trimmed.split('/').skip(1).collect();
    if !path.starts_with('/') {
        return Err(RouteError::NotFound);
    }
    let (resource, namespace, name) = match segments.as_slice() {
        ["healthz" | "livez" | "readyz"] => return Ok(Request::Health),
        ["apis"] => return Ok(Request::GroupList),
        ["openapi", "v2"] => return Ok(Request::OpenApi { v3: false }),
        ["openapi", "v3"] => return Ok(Request::OpenApi { v3: true }),
        ["apis", GROUP] => return Ok(Request::Group),
        ["apis", GROUP, VERSION] => return Ok(Request::ResourceList),
        ["apis", GROUP, VERSION, "nodes"] => (Resource::Nodes, None, None),
        ["apis", GROUP, VERSION, "nodes", name] => (Resource::Nodes, None, Some(*name)),
        ["apis", GROUP, VERSION, "pods"] => (Resource::Pods, None, None),
        ["apis", GROUP, VERSION, "namespaces", namespace, "pods"] => {
            (Resource::Pods, Some(*namespace), None)
        }
        [
            "apis",
            GROUP,
            VERSION,
            "namespaces",
            namespace,
            "pods",
            name,
        ] => (Resource::Pods, Some(*namespace), Some(*name)),
        _ => return Err(RouteError::NotFound),
    };
    let namespace = namespace.map(|n| object_name("namespace", n)).transpose()?;
    let params = query_params(query)?;
    if params
        .iter()
        .any(|(key, value)| key == "watch" && value != "false")
    {
        return Err(bad("watch is not supported by the metrics API"));
    }
    match name {
        Some(name) => Ok(Request::Get {
            resource,
            namespace,
            name: object_name("name", name)?,
        }),
        None => {
            let mut filter = Filter::default();
            for (key, value) in &params {
                match key.as_str() {
                    "labelSelector" => {
                        filter.labels.extend(parse_label_selector(value)?);
                    }
                    "fieldSelector" => {
                        filter.fields.extend(parse_field_selector(value, resource)?);
                    }
                    // resourceVersion, limit, timeout…: lists are always whole and current.
                    _ => {}
                }
            }
            Ok(Request::List {
                resource,
                namespace,
                filter,
            })
        }
    }
}

fn object_name(what: &str, name: &str) -> Result<String, RouteError> {
    let name = percent_decode(name)?;
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'));
    if valid {
        Ok(name)
    } else {
        Err(bad(format!("invalid {what} {name:?}")))
    }
}

/// `key=value` pairs of a URL query, percent-decoded (`+` is a space).
fn query_params(query: &str) -> Result<Vec<(String, String)>, RouteError> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((percent_decode(key)?, percent_decode(value)?))
        })
        .collect()
}

fn percent_decode(text: &str) -> Result<String, RouteError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad(format!("invalid percent-encoding in {text:?}")))?;
                out.push(hex);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| bad(format!("{text:?} is not UTF-8")))
}

/// Splits on commas outside parentheses: `a in (x,y),b` is two requirements.
fn requirements(selector: &str) -> Result<Vec<&str>, RouteError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0u8, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            ')' if depth == 1 => depth = 0,
            '(' | ')' => return Err(bad(format!("unbalanced parentheses in {selector:?}"))),
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(bad(format!("unbalanced parentheses in {selector:?}")));
    }
    parts.push(&selector[start..]);
    if parts.len() > MAX_REQUIREMENTS {
        return Err(bad(format!(
            "more than {MAX_REQUIREMENTS} requirements in one selector"
        )));
    }
    Ok(parts)
}

/// A Kubernetes label selector (`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`,
/// `!a`, comma-separated) as kube's [`Expression`]s, which also match them. kube has no
/// parser for the string form; `>` and `<` (integer comparisons) are not supported here.
pub fn parse_label_selector(selector: &str) -> Result<Vec<Expression>, RouteError> {
    if selector.trim().is_empty() {
        return Ok(Vec::new());
    }
    requirements(selector)?
        .into_iter()
        .map(|part| parse_label_requirement(part.trim()))
        .collect()
}

fn parse_label_requirement(part: &str) -> Result<Expression, RouteError> {
    let invalid = || bad(format!("invalid label selector requirement {part:?}"));
    if part.is_empty() {
        return Err(invalid());
    }
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(label_key(key.trim())?));
    }
    if part.contains(['<', '>']) {
        return Err(bad(format!(
            "label selector {part:?}: the operators < and > are not supported"
        )));
    }
    if let Some(open) = part.find('(') {
        let close = part
            .rfind(')')
            .filter(|close| *close > open && close + 1 == part.len());
        let close = close.ok_or_else(invalid)?;
        let mut head = part[..open].split_whitespace();
        let (key, operator) = (head.next(), head.next());
        let (Some(key), Some(operator), None) = (key, operator, head.next()) else {
            return Err(invalid());
        };
        let key = label_key(key)?;
        let values: Vec<&str> = part[open + 1..close].split(',').map(str::trim).collect();
        if values.len() > MAX_VALUES {
            return Err(bad(format!("more than {MAX_VALUES} values in {key:?}")));
        }
        let values = values
            .into_iter()
            .map(label_value)
            .collect::<Result<std::collections::BTreeSet<_>, _>>()?;
        if values.iter().all(String::is_empty) && values.len() == 1 {
            return Err(bad(format!("{part:?}: the set of values cannot be empty")));
        }
        return match operator {
            "in" => Ok(Expression::In(key, values)),
            "notin" => Ok(Expression::NotIn(key, values)),
            _ => Err(invalid()),
        };
    }
    if let Some((key, value)) = part.split_once("!=") {
        return Ok(Expression::NotEqual(
            label_key(key.trim())?,
            label_value(value.trim())?,
        ));
    }
    if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Expression::Equal(
            label_key(key.trim())?,
            label_value(value.trim())?,
        ));
    }
    Ok(Expression::Exists(label_key(part)?))
}

/// `[prefix/]name`, with a DNS-subdomain prefix and a name of at most 63 characters.
fn label_key(key: &str) -> Result<String, RouteError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|prefix| {
        !prefix.is_empty()
            && prefix.len() <= MAX_NAME_LEN
            && prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
    });
    if prefix_ok && !name.is_empty() && is_label_part(name) {
        Ok(key.to_owned())
    } else {
        Err(bad(format!("invalid label key {key:?}")))
    }
}

fn label_value(value: &str) -> Result<String, RouteError> {
    if value.is_empty() || is_label_part(value) {
        Ok(value.to_owned())
    } else {
        Err(bad(format!("invalid label value {value:?}")))
    }
}

/// Alphanumerics with `-`, `_` or `.` inside, at most 63 characters.
fn is_label_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    bytes.len() <= MAX_LABEL_VALUE_LEN
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The field selectors metrics-server supports: `metadata.name` for both resources and
/// `metadata.namespace` for pods, with `=`, `==` or `!=`.
pub fn parse_field_selector(
    selector: &str,
    resource: Resource,
) -> Result<Vec<FieldRequirement>, RouteError> {
    if selector.trim().is_empty() {
        return Ok(Vec::new());
    }
    requirements(selector)?
        .into_iter()
        .map(|part| {
            let part = part.trim();
            let (field, value, equal) = if let Some((field, value)) = part.split_once("!=") {
                (field, value, false)
            } else if let Some((field, value)) =
                part.split_once("==").or_else(|| part.split_once('='))
            {
                (field, value, true)
            } else {
                return Err(bad(format!("invalid field selector requirement {part:?}")));
            };
            let field = match (field.trim(), resource) {
                ("metadata.name", _) => Field::Name,
                ("metadata.namespace", Resource::Pods) => Field::Namespace,
                (other, _) => {
                    return Err(bad(format!(
                        "field label not supported: {other:?} (only metadata.name, and \
                         metadata.namespace for pods)"
                    )));
                }
            };
            let value = value.trim();
            if value.len() > MAX_NAME_LEN {
                return Err(bad(format!("field selector value {value:?} is too long")));
            }
            Ok(FieldRequirement {
                field,
                value: value.to_owned(),
                equal,
            })
        })
        .collect()
}

/// A running pod the pool meters, with its labels (empty when not known yet).
#[derive(Debug, Clone)]
pub struct MeteredPod {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub labels: BTreeMap<String, String>,
    pub containers: Vec<ContainerReading>,
}

/// When a read happens and the window its figures stand for.
#[derive(Debug, Clone, Copy)]
pub struct ReadTime {
    pub now: Timestamp,
    pub window: Duration,
}

/// The answer to `request`: discovery documents, or the metered pods (and the nodes they run
/// on, whose usage is the sum of theirs) that the request names. `node_labels` gives a node's
/// labels, for label selectors on nodes.
pub fn respond(
    request: &Request,
    pods: &[MeteredPod],
    node_labels: impl Fn(&str) -> BTreeMap<String, String>,
    read: ReadTime,
) -> Reply {
    match request {
        Request::Health => Reply::ok(Value::String("ok".to_owned())),
        Request::OpenApi { v3: false } => Reply::ok(json!({
            "swagger": "2.0",
            "info": {"title": "ksim-vnode metrics API", "version": VERSION},
            "paths": {},
        })),
        Request::OpenApi { v3: true } => Reply::ok(json!({"paths": {}})),
        Request::GroupList => Reply::ok(json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [api_group()],
        })),
        Request::Group => {
            let mut group = api_group();
            group["kind"] = json!("APIGroup");
            group["apiVersion"] = json!("v1");
            Reply::ok(group)
        }
        Request::ResourceList => Reply::ok(json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": GROUP_VERSION,
            "resources": [
                {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
                {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]},
            ],
        })),
        Request::List {
            resource: Resource::Pods,
            namespace,
            filter,
        } => {
            let mut items: Vec<&MeteredPod> = pods
                .iter()
                .filter(|pod| namespace.as_ref().is_none_or(|ns| *ns == pod.namespace))
                .filter(|pod| filter.keeps(&pod.namespace, &pod.name, &pod.labels))
                .collect();
            items.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            let items: Vec<Value> = items
                .into_iter()
                .map(|pod| pod_metrics(pod, read))
                .collect();
            Reply::ok(list("PodMetricsList", items))
        }
        Request::Get {
            resource: Resource::Pods,
            namespace,
            name,
        } => pods
            .iter()
            .find(|pod| {
                pod.name == *name && namespace.as_ref().is_none_or(|ns| *ns == pod.namespace)
            })
            .map(|pod| Reply::ok(with_kind(pod_metrics(pod, read), "PodMetrics")))
            .unwrap_or_else(|| Reply::not_found(Resource::Pods, name)),
        Request::List {
            resource: Resource::Nodes,
            filter,
            ..
        } => {
            let items: Vec<Value> = node_usage(pods)
                .into_iter()
                .filter_map(|(node, usage)| {
                    let labels = node_labels(node);
                    filter
                        .keeps("", node, &labels)
                        .then(|| node_metrics(node, labels, usage, read))
                })
                .collect();
            Reply::ok(list("NodeMetricsList", items))
        }
        Request::Get {
            resource: Resource::Nodes,
            name,
            ..
        } => node_usage(pods)
            .remove(name.as_str())
            .map(|usage| {
                let metrics = node_metrics(name, node_labels(name), usage, read);
                Reply::ok(with_kind(metrics, "NodeMetrics"))
            })
            .unwrap_or_else(|| Reply::not_found(Resource::Nodes, name)),
    }
}

fn api_group() -> Value {
    let version = json!({"groupVersion": GROUP_VERSION, "version": VERSION});
    json!({"name": GROUP, "versions": [version], "preferredVersion": version})
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": GROUP_VERSION, "metadata": {}, "items": items})
}

fn with_kind(mut object: Value, kind: &str) -> Value {
    if let Value::Object(map) = &mut object {
        map.insert("kind".to_owned(), json!(kind));
        map.insert("apiVersion".to_owned(), json!(GROUP_VERSION));
    }
    object
}

/// CPU nanocores and memory bytes per node, summed over its metered pods, by node name.
fn node_usage(pods: &[MeteredPod]) -> BTreeMap<&str, (u64, u64)> {
    let mut nodes: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for pod in pods {
        let (cpu, memory) = nodes.entry(pod.node.as_str()).or_default();
        for container in &pod.containers {
            *cpu = cpu.saturating_add(container.cpu_nanocores);
            *memory = memory.saturating_add(container.memory_bytes);
        }
    }
    nodes
}

fn metadata(
    namespace: Option<&str>,
    name: &str,
    labels: BTreeMap<String, String>,
    now: &str,
) -> Value {
    let mut metadata = json!({"name": name, "creationTimestamp": now});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    if !labels.is_empty() {
        metadata["labels"] = json!(labels);
    }
    metadata
}

fn pod_metrics(pod: &MeteredPod, read: ReadTime) -> Value {
    let now = timestamp(read.now);
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|container| {
            json!({"name": container.name, "usage": usage(container.cpu_nanocores, container.memory_bytes)})
        })
        .collect();
    json!({
        "metadata": metadata(Some(&pod.namespace), &pod.name, pod.labels.clone(), &now),
        "timestamp": now,
        "window": go_duration(read.window),
        "containers": containers,
    })
}

fn node_metrics(
    node: &str,
    labels: BTreeMap<String, String>,
    (cpu, memory): (u64, u64),
    read: ReadTime,
) -> Value {
    let now = timestamp(read.now);
    json!({
        "metadata": metadata(None, node, labels, &now),
        "timestamp": now,
        "window": go_duration(read.window),
        "usage": usage(cpu, memory),
    })
}

fn usage(cpu_nanocores: u64, memory_bytes: u64) -> Value {
    json!({"cpu": cpu_quantity(cpu_nanocores), "memory": memory_quantity(memory_bytes)})
}

/// RFC 3339 in UTC, to the second, as a Kubernetes `Time` is written.
fn timestamp(now: Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

const DECIMAL_SUFFIXES: [(i32, &str); 10] = [
    (-9, "n"),
    (-6, "u"),
    (-3, "m"),
    (0, ""),
    (3, "k"),
    (6, "M"),
    (9, "G"),
    (12, "T"),
    (15, "P"),
    (18, "E"),
];

/// `value × 10^exponent` in a Kubernetes quantity's canonical DecimalSI form: trailing zeros
/// taken into the exponent, which is then lowered to a multiple of three with a suffix.
fn decimal_si(mut value: u64, mut exponent: i32) -> String {
    if value == 0 {
        return "0".to_owned();
    }
    while value >= 10 && value.is_multiple_of(10) {
        value /= 10;
        exponent += 1;
    }
    match exponent.rem_euclid(3) {
        1 => {
            value *= 10;
            exponent -= 1;
        }
        2 => {
            value *= 100;
            exponent -= 2;
        }
        _ => {}
    }
    let suffix = DECIMAL_SUFFIXES
        .iter()
        .find(|(e, _)| *e == exponent)
        .map(|(_, suffix)| *suffix);
    match suffix {
        Some(suffix) => format!("{value}{suffix}"),
        // Beyond exa: the exponent form, which no figure the pool accepts reaches.
        None => format!("{value}e{exponent}"),
    }
}

/// CPU as metrics-server prints it: nanocores as a DecimalSI quantity (`250m`, `1500m`,
/// `2`, `123456n`).
pub fn cpu_quantity(nanocores: u64) -> String {
    decimal_si(nanocores, -9)
}

/// Memory as metrics-server prints it: bytes as a BinarySI quantity, the largest power of
/// 1024 that divides it (`3404Ki`, `16Mi`, `12345678`); under 1 Ki, plain DecimalSI.
pub fn memory_quantity(bytes: u64) -> String {
    if bytes < 1024 {
        return decimal_si(bytes, 0);
    }
    let (mut value, mut power) = (bytes, 0);
    while value >= 1024 && value.is_multiple_of(1024) && power < 6 {
        value /= 1024;
        power += 1;
    }
    let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
    format!("{value}{suffix}")
}

/// A duration as Go's `time.Duration` prints it (`15s`, `1m30s`, `1h0m0s`, `1.5s`), to the
/// millisecond: the `window` field is a Go duration.
pub fn go_duration(duration: Duration) -> String {
    let total_ms = duration.as_millis();
    if total_ms == 0 {
        return "0s".to_owned();
    }
    if total_ms < 1000 {
        return format!("{total_ms}ms");
    }
    let (hours, minutes) = (total_ms / 3_600_000, (total_ms / 60_000) % 60);
    let (seconds, millis) = ((total_ms / 1000) % 60, total_ms % 1000);
    let seconds = if millis == 0 {
        seconds.to_string()
    } else {
        format!("{seconds}.{millis:03}")
            .trim_end_matches('0')
            .to_owned()
    };
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const BASE: &str = "/apis/metrics.k8s.io/v1beta1";

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn container(name: &str, cpu_nanocores: u64, memory_bytes: u64) -> ContainerReading {
        ContainerReading {
            name: name.to_owned(),
            cpu_nanocores,
            memory_bytes,
            cpu_seconds_total: 0.0,
            started: Timestamp::UNIX_EPOCH,
        }
    }

    fn pod(ns: &str, name: &str, node: &str, app: &str, cpu: u64, mem: u64) -> MeteredPod {
        MeteredPod {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            node: node.to_owned(),
            labels: labels(&[("app", app)]),
            containers: vec![container("app", cpu, mem)],
        }
    }

    fn read() -> ReadTime {
        ReadTime {
            now: "2026-03-01T12:00:05.750Z".parse().unwrap(),
            window: DEFAULT_WINDOW,
        }
    }

    fn fleet() -> Vec<MeteredPod> {
        vec![
            pod("shop", "web-1", "n1", "web", 250_000_000, 64 << 20),
            pod("shop", "web-2", "n2", "web", 500_000_000, 32 << 20),
            pod("shop", "db-0", "n1", "db", 1_000_000_000, 1 << 30),
            pod("other", "web-1", "n2", "web", 1_234_567, 4096 * 3),
        ]
    }

    fn answer(path: &str, query: Option<&str>) -> Reply {
        let request = route(path, query).unwrap();
        respond(
            &request,
            &fleet(),
            |node| labels(&[("zone", if node == "n1" { "a" } else { "b" })]),
            read(),
        )
    }

    fn names(reply: &Reply) -> Vec<String> {
        reply.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                let meta = &item["metadata"];
                match meta["namespace"].as_str() {
                    Some(ns) => format!("{ns}/{}", meta["name"].as_str().unwrap()),
                    None => meta["name"].as_str().unwrap().to_owned(),
                }
            })
            .collect()
    }

    #[test]
    fn paths_name_discovery_lists_and_gets() {
        assert_eq!(route("/apis", None), Ok(Request::GroupList));
        assert_eq!(route("/apis/metrics.k8s.io/", None), Ok(Request::Group));
        assert_eq!(route(BASE, None), Ok(Request::ResourceList));
        assert_eq!(route("/healthz", None), Ok(Request::Health));
        assert_eq!(
            route(&format!("{BASE}/nodes/n1"), None),
            Ok(Request::Get {
                resource: Resource::Nodes,
                namespace: None,
                name: "n1".into()
            })
        );
        assert_eq!(
            route(&format!("{BASE}/namespaces/shop/pods/web-1"), None),
            Ok(Request::Get {
                resource: Resource::Pods,
                namespace: Some("shop".into()),
                name: "web-1".into()
            })
        );
        assert!(matches!(
            route(&format!("{BASE}/pods"), None),
            Ok(Request::List {
                resource: Resource::Pods,
                namespace: None,
                ..
            })
        ));
        for missing in [
            "/",
            "/api/v1/pods",
            "/apis/metrics.k8s.io/v1",
            &format!("{BASE}/namespaces/shop/nodes"),
            &format!("{BASE}/pods/web-1"),
            &format!("{BASE}/nodes/n1/extra"),
        ] {
            assert_eq!(route(missing, None), Err(RouteError::NotFound), "{missing}");
        }
    }

    #[test]
    fn oversized_or_malformed_requests_are_bad_requests() {
        let long = format!("{BASE}/nodes/{}", "a".repeat(MAX_PATH_LEN));
        assert!(matches!(route(&long, None), Err(RouteError::BadRequest(_))));
        let query = format!("labelSelector={}", "a".repeat(MAX_QUERY_LEN));
        let pods = format!("{BASE}/pods");
        assert!(matches!(
            route(&pods, Some(&query)),
            Err(RouteError::BadRequest(_))
        ));
        for query in [
            "labelSelector=app%zz",
            "labelSelector=app%20in%20(a",
            "labelSelector=a%3E1",
            "labelSelector=app%3D%3Dbad%20value",
            "fieldSelector=spec.nodeName%3Dn1",
            "watch=true",
        ] {
            let result = route(&pods, Some(query));
            assert!(
                matches!(result, Err(RouteError::BadRequest(_))),
                "{query}: {result:?}"
            );
        }
        let reply = Reply::from(route(&pods, Some("watch=1")).unwrap_err());
        assert_eq!(reply.code, 400);
        assert_eq!(reply.body["kind"], "Status");
        assert_eq!(reply.body["reason"], "BadRequest");
        assert!(matches!(
            route(&format!("{BASE}/namespaces/a%2Fb/pods"), None),
            Err(RouteError::BadRequest(_))
        ));
    }

    #[test]
    fn label_selectors_parse_to_kube_expressions() {
        let parsed = parse_label_selector(
            "app=web, tier==front,env!=prod,zone in (a, b),team notin (x),release,!canary,example.com/role=api",
        )
        .unwrap();
        let set = |values: &[&str]| values.iter().map(|v| v.to_string()).collect();
        assert_eq!(
            parsed,
            vec![
                Expression::Equal("app".into(), "web".into()),
                Expression::Equal("tier".into(), "front".into()),
                Expression::NotEqual("env".into(), "prod".into()),
                Expression::In("zone".into(), set(&["a", "b"])),
                Expression::NotIn("team".into(), set(&["x"])),
                Expression::Exists("release".into()),
                Expression::DoesNotExist("canary".into()),
                Expression::Equal("example.com/role".into(), "api".into()),
            ]
        );
        assert_eq!(parse_label_selector("").unwrap(), vec![]);
        assert_eq!(
            parse_label_selector("app=").unwrap(),
            vec![Expression::Equal("app".into(), "".into())]
        );
        for bad in [
            "app in ()",
            "=web",
            "app in (a) x",
            "app like (a)",
            "-app",
            "a,,b",
        ] {
            assert!(parse_label_selector(bad).is_err(), "{bad}");
        }
        let many = vec!["a"; MAX_REQUIREMENTS + 1].join(",");
        assert!(parse_label_selector(&many).is_err());
    }

    #[test]
    fn pod_lists_are_filtered_by_namespace_labels_and_fields() {
        let all = answer(&format!("{BASE}/pods"), None);
        assert_eq!(
            names(&all),
            ["other/web-1", "shop/db-0", "shop/web-1", "shop/web-2"]
        );
        let shop = format!("{BASE}/namespaces/shop/pods");
        assert_eq!(
            names(&answer(&shop, None)),
            ["shop/db-0", "shop/web-1", "shop/web-2"]
        );
        assert_eq!(
            names(&answer(&shop, Some("labelSelector=app%3Dweb"))),
            ["shop/web-1", "shop/web-2"]
        );
        assert_eq!(
            names(&answer(&shop, Some("labelSelector=app+notin+(web)"))),
            ["shop/db-0"]
        );
        assert_eq!(
            names(&answer(&shop, Some("labelSelector=!app"))),
            Vec::<String>::new()
        );
        assert_eq!(
            names(&answer(
                &format!("{BASE}/pods"),
                Some("fieldSelector=metadata.name%3Dweb-1,metadata.namespace!%3Dshop")
            )),
            ["other/web-1"]
        );
    }

    #[test]
    fn pod_metrics_carry_metrics_server_fields_and_quantities() {
        let reply = answer(&format!("{BASE}/namespaces/shop/pods"), None);
        assert_eq!(reply.code, 200);
        assert_eq!(reply.body["kind"], "PodMetricsList");
        assert_eq!(reply.body["apiVersion"], "metrics.k8s.io/v1beta1");
        let web = &reply.body["items"][1];
        assert_eq!(
            web,
            &json!({
                "metadata": {"name": "web-1", "namespace": "shop",
                             "creationTimestamp": "2026-03-01T12:00:05Z", "labels": {"app": "web"}},
                "timestamp": "2026-03-01T12:00:05Z",
                "window": "15s",
                "containers": [{"name": "app", "usage": {"cpu": "250m", "memory": "64Mi"}}],
            })
        );
        let one = answer(&format!("{BASE}/namespaces/other/pods/web-1"), None);
        assert_eq!(one.body["kind"], "PodMetrics");
        assert_eq!(
            one.body["containers"][0]["usage"],
            json!({"cpu": "1234567n", "memory": "12Ki"})
        );
        let missing = answer(&format!("{BASE}/namespaces/shop/pods/nope"), None);
        assert_eq!(missing.code, 404);
        assert_eq!(
            missing.body["message"],
            "podmetrics.metrics.k8s.io \"nope\" not found"
        );
    }

    #[test]
    fn a_nodes_usage_is_the_sum_of_its_metered_pods() {
        let reply = answer(&format!("{BASE}/nodes"), None);
        assert_eq!(reply.body["kind"], "NodeMetricsList");
        assert_eq!(names(&reply), ["n1", "n2"]);
        assert_eq!(
            reply.body["items"][0]["usage"],
            json!({"cpu": "1250m", "memory": "1088Mi"})
        );
        assert_eq!(
            reply.body["items"][1]["usage"],
            json!({"cpu": "501234567n", "memory": "32780Ki"})
        );
        assert_eq!(reply.body["items"][1]["metadata"]["labels"]["zone"], "b");
        let zone_a = answer(&format!("{BASE}/nodes"), Some("labelSelector=zone%3Da"));
        assert_eq!(names(&zone_a), ["n1"]);
        let one = answer(&format!("{BASE}/nodes/n2"), None);
        assert_eq!((one.code, &one.body["kind"]), (200, &json!("NodeMetrics")));
        let none = answer(&format!("{BASE}/nodes/n3"), None);
        assert_eq!(none.code, 404);
    }

    #[test]
    fn discovery_names_the_group_and_both_resources() {
        let groups = answer("/apis", None);
        assert_eq!(groups.body["groups"][0]["name"], GROUP);
        assert_eq!(
            groups.body["groups"][0]["preferredVersion"]["groupVersion"],
            GROUP_VERSION
        );
        assert_eq!(
            answer("/apis/metrics.k8s.io", None).body["kind"],
            "APIGroup"
        );
        let resources = answer(BASE, None);
        assert_eq!(resources.body["groupVersion"], GROUP_VERSION);
        let kinds: Vec<_> = resources.body["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["name"].clone(), r["namespaced"].clone()))
            .collect();
        assert_eq!(
            kinds,
            [(json!("nodes"), json!(false)), (json!("pods"), json!(true))]
        );
    }

    #[test]
    fn access_is_what_the_apiserver_would_authorize() {
        let list = route(&format!("{BASE}/namespaces/shop/pods"), None).unwrap();
        assert_eq!(
            list.access("/x"),
            Access::Resource {
                verb: "list",
                resource: Resource::Pods,
                namespace: Some("shop".into()),
                name: None
            }
        );
        let get = route(&format!("{BASE}/nodes/n1"), None).unwrap();
        assert_eq!(
            get.access("/x"),
            Access::Resource {
                verb: "get",
                resource: Resource::Nodes,
                namespace: None,
                name: Some("n1".into())
            }
        );
        assert_eq!(
            Request::ResourceList.access(BASE),
            Access::NonResource { path: BASE.into() }
        );
        assert_eq!(Request::Health.access("/healthz"), Access::Anyone);
        let forbidden = Reply::forbidden("jane", &list.access("/x"));
        assert_eq!(forbidden.code, 403);
        assert_eq!(
            forbidden.body["message"],
            "podmetrics.metrics.k8s.io is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"metrics.k8s.io\" in the namespace \"shop\""
        );
    }

    #[test]
    fn quantities_are_canonical_like_kubernetes_prints_them() {
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(1_500_000_000), "1500m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(123_456), "123456n");
        assert_eq!(cpu_quantity(10_000), "10u");
        assert_eq!(cpu_quantity(3_000_000_000_000), "3k");
        assert_eq!(memory_quantity(0), "0");
        assert_eq!(memory_quantity(500), "500");
        assert_eq!(memory_quantity(1000), "1k");
        assert_eq!(memory_quantity(3_485_696), "3404Ki");
        assert_eq!(memory_quantity(16 << 20), "16Mi");
        assert_eq!(memory_quantity(12_345_678), "12345678");
        assert_eq!(memory_quantity(5 << 40), "5Ti");
    }

    #[test]
    fn windows_are_go_durations() {
        assert_eq!(go_duration(DEFAULT_WINDOW), "15s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
    }
}
