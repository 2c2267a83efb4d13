//! The serde forms `report.json` gives the well-known types inside the messages it holds
//! (build.rs, `REPORT_JSON_FIELDS`): a duration as whole milliseconds, `"offset_ms": 1500`, an
//! enum as its word, as the report has always written them.

/// An `Option<prost_types::Duration>` as whole milliseconds: absent or negative is 0, and a
/// value read is always present. Sub-millisecond parts are dropped, as the report keeps
/// offsets and intervals to the millisecond.
pub mod millis {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        duration: &Option<prost_types::Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(super::to_millis(duration.as_ref()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<prost_types::Duration>, D::Error> {
        u64::deserialize(deserializer).map(|ms| Some(super::of_millis(ms)))
    }
}

/// An `Option<prost_types::Duration>` as whole milliseconds where absence means something
/// ("not within the run"): absent is `null`, and `null` or a missing field reads as absent.
pub mod optional_millis {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        duration: &Option<prost_types::Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(duration) => serializer.serialize_some(&super::to_millis(Some(duration))),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<prost_types::Duration>, D::Error> {
        Option::<u64>::deserialize(deserializer).map(|ms| ms.map(super::of_millis))
    }
}

/// An `Option<prost_types::Duration>` as fractional milliseconds to the microsecond
/// (`"p99_ms": 12.345`), as the report keeps distributions: lateness is often under a
/// millisecond. Absent or negative is 0, and a value read is always present.
pub mod fractional_millis {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        duration: &Option<prost_types::Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(super::to_fractional_millis(duration.as_ref()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<prost_types::Duration>, D::Error> {
        f64::deserialize(deserializer).map(|ms| Some(super::of_fractional_millis(ms)))
    }
}

/// Fractional milliseconds of a proto duration, rounded to the microsecond; absent or negative
/// is 0.
pub fn to_fractional_millis(duration: Option<&prost_types::Duration>) -> f64 {
    (non_negative(duration).as_nanos() as f64 / 1000.0).round() / 1000.0
}

/// A proto duration of `ms` fractional milliseconds, to the microsecond; negative or NaN is 0,
/// past what a duration holds saturates.
pub fn of_fractional_millis(ms: f64) -> prost_types::Duration {
    let micros = (ms * 1000.0).round();
    // `as` saturates, the right answer for absurdly large values; NaN is excluded first.
    let micros = if micros.is_finite() && micros > 0.0 {
        micros as u64
    } else {
        0
    };
    // u64 microseconds are under 600,000 years: a proto duration holds them.
    prost_types::Duration::try_from(std::time::Duration::from_micros(micros)).unwrap_or_default()
}

/// Enum fields (`i32` on the wire) as report.json has always written them: the lowercase name
/// of the value without its enum's prefix, its underscores as the given separator
/// (`REPLICA_SOURCE_HPA` as `"hpa"`, `AUTOSCALER_FLAG_SOURCE_CA_DEFAULT` as `"ca-default"`). A
/// value this build does not know is written `"unspecified"`; a word it does not know is
/// refused, named.
macro_rules! enum_words {
    ($($(#[$doc:meta])* $module:ident: $enum:ty, $prefix:literal, $separator:literal;)*) => {$(
        $(#[$doc])*
        pub mod $module {
            use serde::{Deserialize, Deserializer, Serializer};

            pub fn serialize<S: Serializer>(value: &i32, serializer: S) -> Result<S::Ok, S::Error> {
                let word = <$enum>::try_from(*value).map_or_else(
                    |_| "unspecified".to_owned(),
                    |known| super::word_of(known.as_str_name(), $prefix, $separator),
                );
                serializer.serialize_str(&word)
            }

            /// `null`, as reports wrote a value they did not know, is unspecified.
            pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
                let Some(word) = Option::<String>::deserialize(deserializer)? else {
                    return Ok(0);
                };
                <$enum>::from_str_name(&super::name_of(&word, $prefix, $separator))
                    .map(|known| known as i32)
                    .ok_or_else(|| serde::de::Error::custom(format!("unknown value {word:?}")))
            }
        }
    )*};
}

enum_words! {
    /// `ReplicaSource`: `"recorded"`, `"hpa"`.
    replica_source: crate::ksim::driver::v1::ReplicaSource, "REPLICA_SOURCE_", "_";
    /// `AutoscalerFlagSource`: `"ca-default"`, `"recording"`, `"environment"`, `"run"`.
    autoscaler_flag_source: crate::ksim::env::v1::AutoscalerFlagSource, "AUTOSCALER_FLAG_SOURCE_", "-";
    /// `NodeChangeKind`: `"added"`, `"removed"`.
    node_change_kind: crate::ksim::driver::v1::NodeChangeKind, "NODE_CHANGE_KIND_", "_";
    /// `NodeChangeCause`: `"autoscaler"`, `"pool"`, `"reregistration"`.
    node_change_cause: crate::ksim::driver::v1::NodeChangeCause, "NODE_CHANGE_CAUSE_", "_";
    /// `ObjectOperation`: `"apply"`, `"delete"`, `"cron_run"`.
    object_operation: crate::ksim::driver::v1::ObjectOperation, "OBJECT_OPERATION_", "_";
}

/// Whether an enum field holds its unspecified value (0), which report.json leaves out.
pub fn is_unspecified(value: &i32) -> bool {
    *value == 0
}

/// `REPLICA_SOURCE_HPA` less `REPLICA_SOURCE_`, lowercase, `_` as `separator`: `hpa`.
fn word_of(name: &str, prefix: &str, separator: &str) -> String {
    name.strip_prefix(prefix)
        .unwrap_or(name)
        .to_ascii_lowercase()
        .replace('_', separator)
}

/// The enum value's proto name for a word: `hpa` is `REPLICA_SOURCE_HPA`.
fn name_of(word: &str, prefix: &str, separator: &str) -> String {
    format!(
        "{prefix}{}",
        word.replace(separator, "_").to_ascii_uppercase()
    )
}

/// A report's speed when it did not say: reports from before it was kept ran at 1x.
pub fn one() -> f64 {
    1.0
}

/// A report's bucket width when it did not say: reports from before it was kept had 1 s.
pub fn a_second() -> Option<prost_types::Duration> {
    Some(of_millis(1000))
}

/// An `Option<prost_types::Timestamp>` as Unix milliseconds (`"time_ms": 1767225600000`);
/// absent is 0, and a value read is always present.
pub mod unix_millis {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        time: &Option<prost_types::Timestamp>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let ms = time.as_ref().map_or(0, |time| {
            time.seconds
                .saturating_mul(1000)
                .saturating_add(i64::from(time.nanos / 1_000_000))
        });
        serializer.serialize_i64(ms)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<prost_types::Timestamp>, D::Error> {
        let ms = i64::deserialize(deserializer)?;
        Ok(Some(prost_types::Timestamp {
            seconds: ms.div_euclid(1000),
            // Below 1e9, so it fits.
            nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
        }))
    }
}

/// Whether a count is 0: report.json leaves such counts out.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
pub fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A timeline bucket's nodes, one `NodeGroupCount` per group, as report.json has always held
/// them: an object by group, `{"m5": {"nodes": 2, "ready": 1}}`, the counts a group does not
/// have (priced, launching, GPU nodes) left out.
pub mod node_group_counts {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::ksim::driver::v1::NodeGroupCount;

    use super::is_zero;

    #[derive(Serialize, Deserialize)]
    struct Count {
        nodes: u64,
        ready: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        priced: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        price_micros_per_hour: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        launching: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        gpu_nodes: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        gpu_price_micros_per_hour: u64,
    }

    pub fn serialize<S: Serializer>(
        counts: &[NodeGroupCount],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_map(counts.iter().map(|count| {
            let held = Count {
                nodes: count.nodes,
                ready: count.ready_nodes,
                priced: count.priced_nodes,
                price_micros_per_hour: count.price_micros_per_hour,
                launching: count.launching_nodes,
                gpu_nodes: count.gpu_nodes,
                gpu_price_micros_per_hour: count.gpu_price_micros_per_hour,
            };
            (&count.node_group, held)
        }))
    }

    /// In the groups' order, as the object's keys are kept.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<NodeGroupCount>, D::Error> {
        let held = BTreeMap::<String, Count>::deserialize(deserializer)?;
        Ok(held
            .into_iter()
            .map(|(node_group, count)| NodeGroupCount {
                node_group,
                nodes: count.nodes,
                ready_nodes: count.ready,
                priced_nodes: count.priced,
                price_micros_per_hour: count.price_micros_per_hour,
                launching_nodes: count.launching,
                gpu_nodes: count.gpu_nodes,
                gpu_price_micros_per_hour: count.gpu_price_micros_per_hour,
            })
            .collect())
    }
}

/// Optional messages of one field that report.json has always held as that field alone: the
/// message's field written in its place, and read back into it.
macro_rules! held_as_field {
    ($($(#[$doc:meta])* $module:ident: $message:ty, $field:ident: $value:ty;)*) => {$(
        $(#[$doc])*
        pub mod $module {
            use serde::{Deserialize, Deserializer, Serializer};

            type Held = $message;

            pub fn serialize<S: Serializer>(
                held: &Option<Held>,
                serializer: S,
            ) -> Result<S::Ok, S::Error> {
                match held {
                    Some(held) => serializer.serialize_some(&held.$field),
                    None => serializer.serialize_none(),
                }
            }

            pub fn deserialize<'de, D: Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Option<Held>, D::Error> {
                Option::<$value>::deserialize(deserializer)
                    .map(|value| value.map(|$field| Held { $field }))
            }
        }
    )*};
}

held_as_field! {
    /// cluster-autoscaler's outages as the list itself, left out when unknown.
    autoscaler_outages: crate::ksim::driver::v1::AutoscalerOutages,
        outages: Vec<crate::ksim::driver::v1::AutoscalerOutage>;
    /// Karpenter's run as its release alone, `"karpenter": "v1.14.1"`.
    karpenter_run: crate::ksim::env::v1::KarpenterRun, version: String;
}

/// Whole milliseconds of a proto duration; absent or negative is 0, past `u64` saturates.
pub fn to_millis(duration: Option<&prost_types::Duration>) -> u64 {
    u64::try_from(non_negative(duration).as_millis()).unwrap_or(u64::MAX)
}

/// A proto duration as a std one; absent or negative is zero (nothing reported is negative).
fn non_negative(duration: Option<&prost_types::Duration>) -> std::time::Duration {
    duration
        .and_then(|d| std::time::Duration::try_from(*d).ok())
        .unwrap_or_default()
}

/// A proto duration of `ms` milliseconds.
pub fn of_millis(ms: u64) -> prost_types::Duration {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    prost_types::Duration {
        seconds: ms / 1000,
        nanos: i32::try_from((ms % 1000) * 1_000_000).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        #[serde(rename = "offset_ms", with = "super::millis")]
        offset: Option<prost_types::Duration>,
    }

    #[test]
    fn a_duration_is_whole_milliseconds_both_ways() {
        let held = Holder {
            offset: Some(super::of_millis(61_500)),
        };
        assert_eq!(
            held.offset,
            Some(prost_types::Duration {
                seconds: 61,
                nanos: 500_000_000
            })
        );
        let json = serde_json::to_string(&held).unwrap();
        assert_eq!(json, r#"{"offset_ms":61500}"#);
        assert_eq!(serde_json::from_str::<Holder>(&json).unwrap(), held);
    }

    #[test]
    fn absent_and_negative_durations_are_zero() {
        let absent = Holder { offset: None };
        assert_eq!(
            serde_json::to_string(&absent).unwrap(),
            r#"{"offset_ms":0}"#
        );
        let negative = Holder {
            offset: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
        };
        assert_eq!(
            serde_json::to_string(&negative).unwrap(),
            r#"{"offset_ms":0}"#
        );
        let negative_ms: Result<Holder, _> = serde_json::from_str(r#"{"offset_ms":-5}"#);
        assert!(negative_ms.is_err());
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sourced {
        #[serde(with = "super::replica_source")]
        source: i32,
    }

    #[test]
    fn an_enum_is_its_lowercase_word_both_ways_and_an_unknown_word_is_refused() {
        use crate::ksim::driver::v1::ReplicaSource;
        let hpa = Sourced {
            source: ReplicaSource::Hpa as i32,
        };
        let json = serde_json::to_string(&hpa).unwrap();
        assert_eq!(json, r#"{"source":"hpa"}"#);
        assert_eq!(serde_json::from_str::<Sourced>(&json).unwrap(), hpa);
        assert_eq!(
            serde_json::to_string(&Sourced { source: 0 }).unwrap(),
            r#"{"source":"unspecified"}"#
        );
        assert_eq!(
            serde_json::to_string(&Sourced { source: 99 }).unwrap(),
            r#"{"source":"unspecified"}"#
        );
        let unknown = serde_json::from_str::<Sourced>(r#"{"source":"vpa"}"#).unwrap_err();
        assert!(
            unknown.to_string().contains(r#"unknown value "vpa""#),
            "{unknown}"
        );
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Flag {
        #[serde(with = "super::autoscaler_flag_source")]
        source: i32,
    }

    #[test]
    fn an_enum_word_takes_its_separator_both_ways() {
        use crate::ksim::env::v1::AutoscalerFlagSource;
        let default = Flag {
            source: AutoscalerFlagSource::CaDefault as i32,
        };
        let json = serde_json::to_string(&default).unwrap();
        assert_eq!(json, r#"{"source":"ca-default"}"#);
        assert_eq!(serde_json::from_str::<Flag>(&json).unwrap(), default);
        assert!(serde_json::from_str::<Flag>(r#"{"source":"ca"}"#).is_err());
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Distribution {
        #[serde(rename = "p99_ms", with = "super::fractional_millis")]
        p99: Option<prost_types::Duration>,
    }

    #[test]
    fn a_distribution_is_fractional_milliseconds_to_the_microsecond_both_ways() {
        let held = Distribution {
            p99: Some(prost_types::Duration {
                seconds: 12,
                nanos: 345_678_900,
            }),
        };
        let json = serde_json::to_string(&held).unwrap();
        assert_eq!(json, r#"{"p99_ms":12345.679}"#);
        let read = serde_json::from_str::<Distribution>(&json).unwrap();
        assert_eq!(
            read.p99,
            Some(prost_types::Duration {
                seconds: 12,
                nanos: 345_679_000
            })
        );
        assert_eq!(
            serde_json::to_string(&Distribution { p99: None }).unwrap(),
            r#"{"p99_ms":0.0}"#
        );
        let negative = serde_json::from_str::<Distribution>(r#"{"p99_ms":-1.5}"#).unwrap();
        assert_eq!(negative.p99, Some(prost_types::Duration::default()));
        assert_eq!(super::of_fractional_millis(f64::NAN), Default::default());
    }
}
