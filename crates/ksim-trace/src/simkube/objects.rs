//! SimKube events and their Kubernetes objects as trace events.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::model;
use crate::{TraceError, gvk, pb};

/// Converts events in order, remembering the kind of each object applied so far so that a
/// later delete carrying only a name can be given its kind.
#[derive(Debug)]
pub(super) struct EventConverter<'a> {
    /// "namespace/name" -> the kinds under which SimKube's index lists it.
    index: HashMap<&'a str, Vec<&'a str>>,
    /// (namespace, name) -> kind of the latest applied object with that name.
    applied: HashMap<(String, String), pb::GroupVersionKind>,
}

/// Where an object is, for error messages.
struct Place {
    event: usize,
    ts: i64,
    list: &'static str,
    position: usize,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "event {} (ts {}): {} object {}",
            self.event, self.ts, self.list, self.position
        )
    }
}

impl<'a> EventConverter<'a> {
    pub(super) fn new(index: &'a BTreeMap<String, BTreeMap<String, u64>>) -> Self {
        let mut by_name: HashMap<&str, Vec<&str>> = HashMap::new();
        for (kind, objects) in index {
            for key in objects.keys() {
                by_name.entry(key.as_str()).or_default().push(kind.as_str());
            }
        }
        Self {
            index: by_name,
            applied: HashMap::new(),
        }
    }

    /// Converts the event at `position` of SimKube's event list.
    pub(super) fn convert(
        &mut self,
        position: usize,
        event: model::TraceEvent,
    ) -> Result<pb::TraceEvent, TraceError> {
        let timestamp_ms = event_ms(position, event.ts)?;
        let place = |list, object| Place {
            event: position,
            ts: event.ts,
            list,
            position: object,
        };
        let mut applied = Vec::with_capacity(event.applied_objs.len());
        for (object_position, object) in event.applied_objs.into_iter().enumerate() {
            let place = place("applied", object_position);
            let (value, json) = parse(object, &place)?;
            let mut identity = identity(&value, &place)?;
            let Some(gvk) = identity.gvk.take() else {
                return Err(TraceError::simkube(format!(
                    "{place} ({}/{}) has no apiVersion and kind",
                    identity.namespace, identity.name
                )));
            };
            self.applied.insert(
                (identity.namespace.clone(), identity.name.clone()),
                gvk.clone(),
            );
            applied.push(trace_object(gvk, identity, value, json));
        }
        let mut deleted = Vec::with_capacity(event.deleted_objs.len());
        for (object_position, object) in event.deleted_objs.into_iter().enumerate() {
            let place = place("deleted", object_position);
            let (value, json) = parse(object, &place)?;
            let mut identity = identity(&value, &place)?;
            let gvk = match identity.gvk.take() {
                Some(gvk) => gvk,
                None => self.resolve(&identity, &place)?,
            };
            deleted.push(trace_object(gvk, identity, value, json));
        }
        Ok(pb::TraceEvent {
            timestamp_ms,
            applied,
            deleted,
        })
    }

    /// The kind of a deleted object that does not say: the one kind SimKube's index lists it
    /// under, else the kind it was last applied with.
    fn resolve(
        &self,
        identity: &Identity,
        place: &Place,
    ) -> Result<pb::GroupVersionKind, TraceError> {
        let key = format!("{}/{}", identity.namespace, identity.name);
        let candidates = self
            .index
            .get(key.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        if let [kind] = candidates {
            return gvk::parse(kind).map_err(|error| {
                TraceError::simkube(format!(
                    "{place} ({key}): its kind in the index is bad: {error}"
                ))
            });
        }
        let applied_key = (identity.namespace.clone(), identity.name.clone());
        if let Some(gvk) = self.applied.get(&applied_key) {
            return Ok(gvk.clone());
        }
        let why = if candidates.is_empty() {
            "is not in the trace's index and was not applied earlier".to_owned()
        } else {
            format!(
                "is listed in the trace's index under several kinds ({}) and was not applied earlier",
                candidates.join(", ")
            )
        };
        Err(TraceError::simkube(format!(
            "{place} ({key}) has no apiVersion and kind, and {why}"
        )))
    }
}

/// What identifies an object.
struct Identity {
    gvk: Option<pb::GroupVersionKind>,
    namespace: String,
    name: String,
}

fn identity(object: &Value, place: &Place) -> Result<Identity, TraceError> {
    let fail = |problem: &str| TraceError::simkube(format!("{place} {problem}"));
    let Value::Object(fields) = object else {
        return Err(fail("is not a JSON object"));
    };
    let metadata = fields.get("metadata");
    let name = match metadata.and_then(|metadata| metadata.get("name")) {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        _ => return Err(fail("has no metadata.name")),
    };
    let namespace = match metadata.and_then(|metadata| metadata.get("namespace")) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(namespace)) => namespace.clone(),
        Some(_) => return Err(fail("has a metadata.namespace that is not a string")),
    };
    let text = |field| match fields.get(field) {
        Some(Value::String(text)) if !text.is_empty() => Some(text.as_str()),
        _ => None,
    };
    let gvk = match (text("apiVersion"), text("kind")) {
        (Some(api_version), Some(kind)) => Some(gvk::from_api_version(api_version, kind)),
        _ => None,
    };
    if gvk.as_ref().is_some_and(|gvk| gvk.version.is_empty()) {
        return Err(fail("has an apiVersion without a version"));
    }
    Ok(Identity {
        gvk,
        namespace,
        name,
    })
}

/// An object's JSON text as a value, to read its identity from; one object at a time.
fn parse(object: model::Object, place: &Place) -> Result<(Value, Vec<u8>), TraceError> {
    let json = Vec::from(object.0);
    match serde_json::from_slice(&json) {
        Ok(value) => Ok((value, json)),
        // The decoder wrote this text; it parses unless serde_json disagrees with itself.
        Err(error) => Err(TraceError::simkube(format!(
            "{place} does not parse: {error}"
        ))),
    }
}

fn trace_object(
    gvk: pb::GroupVersionKind,
    identity: Identity,
    object: Value,
    json: Vec<u8>,
) -> pb::TraceObject {
    let object_json = if is_secret(&gvk) {
        // A Value has string keys only, so it always serialises.
        serde_json::to_vec(&without_secret_data(object)).unwrap_or_default()
    } else {
        json
    };
    pb::TraceObject {
        gvk: Some(gvk),
        namespace: identity.namespace,
        name: identity.name,
        object_json,
    }
}

fn is_secret(gvk: &pb::GroupVersionKind) -> bool {
    gvk.group.is_empty() && gvk.kind == "Secret"
}

/// The annotation `kubectl apply` leaves, which holds a Secret's data verbatim.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A Secret as the tracer records one: a trace never holds Secret data, so `data`,
/// `stringData` and the last applied configuration (a copy of them) go.
fn without_secret_data(mut object: Value) -> Value {
    if let Some(root) = object.as_object_mut() {
        root.remove("data");
        root.remove("stringData");
    }
    let annotations = object
        .get_mut("metadata")
        .and_then(|metadata| metadata.get_mut("annotations"))
        .and_then(Value::as_object_mut);
    if let Some(annotations) = annotations {
        annotations.remove(LAST_APPLIED);
    }
    object
}

/// The time of the event at `position` of SimKube's list, `ts` seconds, in milliseconds;
/// refused past what a trace can hold (1970 to 9999), which readers refuse.
pub(super) fn event_ms(position: usize, ts: i64) -> Result<i64, TraceError> {
    ts.checked_mul(1000)
        .filter(|ms| crate::time::in_range(*ms))
        .ok_or_else(|| {
            TraceError::simkube(format!(
                "event {position}: timestamp {ts} s is out of range (1970 to 9999)"
            ))
        })
}
