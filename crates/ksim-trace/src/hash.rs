//! Stable hashes of JSON values. They are persisted (a restarted tracer compares against
//! hashes from its log), so they are xxh3 over a canonical walk with sorted keys, never std's
//! hasher or a serialisation whose key order could change. The tracer hashes recorded pods
//! with [`pod_spec_hash`]; a replay hashes its own pods with it to tell their templates apart.

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

pub fn stable_hash(value: &Value) -> u64 {
    let mut hasher = Xxh3::new();
    feed(&mut hasher, value);
    hasher.digest()
}

/// The hash that ties a pod to a recorded lifetime: the pod's spec without what differs between
/// two pods of the same template (the node it was bound to, the generated service-account token volume).
pub fn pod_spec_hash(pod: &Value) -> u64 {
    let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("nodeName");
        if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
            volumes.retain(|v| !is_token_volume(v.get("name")));
        }
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            for container in spec
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(mounts) = container
                    .get_mut("volumeMounts")
                    .and_then(Value::as_array_mut)
                {
                    mounts.retain(|m| !is_token_volume(m.get("name")));
                }
            }
        }
    }
    stable_hash(&spec)
}

fn is_token_volume(name: Option<&Value>) -> bool {
    name.and_then(Value::as_str)
        .is_some_and(|n| n.starts_with("kube-api-access-"))
}

fn feed(hasher: &mut Xxh3, value: &Value) {
    match value {
        Value::Null => hasher.update(b"n"),
        Value::Bool(b) => hasher.update(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            hasher.update(b"#");
            hasher.update(n.to_string().as_bytes());
            hasher.update(b";");
        }
        Value::String(s) => feed_str(hasher, s),
        Value::Array(items) => {
            hasher.update(b"[");
            hasher.update(&(items.len() as u64).to_le_bytes());
            for item in items {
                feed(hasher, item);
            }
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            hasher.update(b"{");
            hasher.update(&(keys.len() as u64).to_le_bytes());
            for key in keys {
                feed_str(hasher, key);
                if let Some(v) = map.get(key) {
                    feed(hasher, v);
                }
            }
        }
    }
}

fn feed_str(hasher: &mut Xxh3, s: &str) {
    // Length-prefixed, so ["ab","c"] and ["a","bc"] differ.
    hasher.update(b"s");
    hasher.update(&(s.len() as u64).to_le_bytes());
    hasher.update(s.as_bytes());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn key_order_does_not_matter_but_content_does() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":{"c":[1,2]}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":{"c":[1,2]},"a":1}"#).unwrap();
        assert_eq!(stable_hash(&a), stable_hash(&b));
        assert_ne!(
            stable_hash(&a),
            stable_hash(&json!({"a":1,"b":{"c":[2,1]}}))
        );
        assert_ne!(
            stable_hash(&json!(["ab", "c"])),
            stable_hash(&json!(["a", "bc"]))
        );
        assert_ne!(stable_hash(&json!("1")), stable_hash(&json!(1)));
    }

    #[test]
    fn the_hash_is_stable_across_builds() {
        // A persisted value: if this changes, restarted tracers see every object as changed.
        assert_eq!(
            stable_hash(&json!({"spec": {"replicas": 3}})),
            0x33ef_4e24_1587_aaf1_u64
        );
    }

    #[test]
    fn pods_of_one_template_share_a_spec_hash() {
        let pod = |node: &str, token: &str| {
            json!({"spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "web:1", "volumeMounts": [{"name": token, "mountPath": "/var/run"}]}],
                "volumes": [{"name": token, "projected": {}}]
            }})
        };
        assert_eq!(
            pod_spec_hash(&pod("n1", "kube-api-access-abcde")),
            pod_spec_hash(&pod("n2", "kube-api-access-xyz12"))
        );
        let other = json!({"spec": {"containers": [{"name": "c", "image": "web:2"}]}});
        assert_ne!(
            pod_spec_hash(&pod("n1", "kube-api-access-abcde")),
            pod_spec_hash(&other)
        );
    }
}
