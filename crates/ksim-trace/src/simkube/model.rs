//! SimKube's trace file (format version 2) as typed serde structures. Typed, not a generic
//! MessagePack value: `pod_lifecycles` is keyed by arrays and its inner maps by integers,
//! which no JSON-like value can hold.

use std::collections::BTreeMap;
use std::io::Cursor;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::TraceError;

/// Only the version, decoded first so another version is refused by number, not by whatever
/// field of its layout fails to decode.
#[derive(Debug, Deserialize)]
struct VersionProbe {
    version: Option<i64>,
}

/// The whole file.
#[derive(Debug, Deserialize)]
pub(super) struct ExportedTrace {
    #[serde(default)]
    pub(super) config: TracerConfig,
    pub(super) events: Vec<TraceEvent>,
    /// Kind -> "namespace/name" -> spec hash.
    #[serde(default)]
    pub(super) index: BTreeMap<String, BTreeMap<String, u64>>,
    /// (kind, "namespace/name") of the owner -> pod spec hash -> lifetimes in launch order.
    #[serde(default)]
    pub(super) pod_lifecycles: BTreeMap<(String, String), BTreeMap<u64, Vec<PodLifecycleData>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TracerConfig {
    /// Keyed by kind, as in "apps/v1.Deployment".
    #[serde(default)]
    pub(super) tracked_objects: BTreeMap<String, TrackedObjectConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TrackedObjectConfig {
    #[serde(default)]
    pub(super) pod_spec_template_paths: Option<Vec<String>>,
    #[serde(default)]
    pub(super) track_lifecycle: Option<bool>,
    #[serde(default)]
    pub(super) skip_owned: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub(super) struct TraceEvent {
    /// Unix seconds.
    pub(super) ts: i64,
    #[serde(default)]
    pub(super) applied_objs: Vec<Object>,
    #[serde(default)]
    pub(super) deleted_objs: Vec<Object>,
}

/// A Kubernetes object held as its JSON text, made as it is decoded: a `serde_json::Value`
/// tree takes ten to twenty times the bytes of its MessagePack (its text about 1.3 times), and a
/// trace holds every object of every event until the events are sorted.
#[derive(Debug)]
pub(super) struct Object(pub(super) Box<[u8]>);

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        // A Value has string keys only, so it always serialises.
        let json = serde_json::to_vec(&value).map_err(serde::de::Error::custom)?;
        Ok(Self(json.into_boxed_slice()))
    }
}

/// One pod's lifetime in Unix seconds.
#[derive(Debug, Deserialize)]
pub(super) enum PodLifecycleData {
    /// A pod was seen but never ran.
    Empty,
    Running(i64),
    Finished(i64, i64),
}

/// The file's `version` field.
pub(super) fn version(input: &[u8]) -> Result<i64, TraceError> {
    let probe: VersionProbe = decode_all(input)?;
    probe
        .version
        .ok_or_else(|| TraceError::simkube("the trace has no version field"))
}

pub(super) fn decode(input: &[u8]) -> Result<ExportedTrace, TraceError> {
    decode_all(input)
}

/// Decodes `T` from the whole of `input`; bytes left over mean the input is not one trace.
fn decode_all<T: DeserializeOwned>(input: &[u8]) -> Result<T, TraceError> {
    let mut decoder = rmp_serde::Deserializer::new(Cursor::new(input));
    let value = T::deserialize(&mut decoder).map_err(|error| {
        TraceError::simkube(format!(
            "MessagePack does not decode as a SimKube trace: {error}"
        ))
    })?;
    let used = decoder.position();
    if used < input.len() as u64 {
        return Err(TraceError::simkube(format!(
            "{} bytes follow the trace, which ends at byte {used}",
            input.len() as u64 - used
        )));
    }
    Ok(value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_held_as_the_json_text_the_conversion_writes() {
        let pod = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]},
        });
        let trace = serde_json::json!({
            "version": 2,
            "events": [{"ts": 1_700_000_000, "applied_objs": [pod], "deleted_objs": [pod]}],
        });
        let bytes = rmp_serde::to_vec_named(&trace).unwrap();
        let decoded = decode(&bytes).unwrap();
        let event = &decoded.events[0];
        let expected = serde_json::to_vec(&pod).unwrap();
        assert_eq!(&*event.applied_objs[0].0, expected.as_slice());
        assert_eq!(&*event.deleted_objs[0].0, expected.as_slice());
    }
}
