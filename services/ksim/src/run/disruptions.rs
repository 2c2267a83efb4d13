//! `--node-failure`, `--zone-outage`, `--stockout`, `--spot-interruption` and
//! `--node-pool-upgrade`: a run's disruptions, each given as
//! comma-separated KEY=VALUE, durations in recorded time. The driver checks them against the
//! run's groups; here only their form.

use std::{collections::BTreeMap, time::Duration};

use ksim_proto::ksim::driver::v1::{
    Disruption, NodeFailure, NodePoolUpgrade, SpotInterruption, Stockout, ZoneOutage,
    disruption::Kind,
};

/// `value`'s parts by key, each of `keys` at most once; errors name the part.
fn parts<'a>(value: &'a str, keys: &[&str]) -> Result<BTreeMap<&'a str, &'a str>, String> {
    let listed = keys.join(", ");
    let mut found = BTreeMap::new();
    for part in value.split(',') {
        let (key, given) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not KEY=VALUE (keys: {listed})"))?;
        if !keys.contains(&key) {
            return Err(format!("unknown key {key:?} (keys: {listed})"));
        }
        if found.insert(key, given).is_some() {
            return Err(format!("{key} is given twice"));
        }
    }
    Ok(found)
}

fn duration(
    parts: &BTreeMap<&str, &str>,
    key: &str,
) -> Result<Option<prost_types::Duration>, String> {
    let Some(given) = parts.get(key) else {
        return Ok(None);
    };
    let parsed: Duration = humantime::parse_duration(given)
        .map_err(|error| format!("{key} {given:?}: {error} (e.g. 10m, 90s)"))?;
    prost_types::Duration::try_from(parsed)
        .map(Some)
        .map_err(|_| format!("{key} {given:?} is too long"))
}

fn required<'a>(parts: &BTreeMap<&str, &'a str>, key: &str, what: &str) -> Result<&'a str, String> {
    parts
        .get(key)
        .copied()
        .ok_or_else(|| match what.split_once(' ') {
            // "DURATION (why)": the value's form, then why it is asked for.
            Some((form, why)) => format!("{key}={form} is required {why}"),
            None => format!("{key}={what} is required"),
        })
}

/// The window every kind has: `at` (required, since the replay's start) and `for`.
fn window(
    parts: &BTreeMap<&str, &str>,
) -> Result<(Option<prost_types::Duration>, Option<prost_types::Duration>), String> {
    required(
        parts,
        "at",
        "DURATION (recorded time since the replay's start)",
    )?;
    Ok((duration(parts, "at")?, duration(parts, "for")?))
}

/// One `--node-failure group=NAME,at=DURATION[,share=S][,for=DURATION]` or
/// `node=NAME,at=DURATION[,for=DURATION]`.
pub fn parse_node_failure(value: &str) -> Result<Disruption, String> {
    let parts = parts(value, &["group", "node", "at", "share", "for"])?;
    if let Some(node) = parts.get("node") {
        if parts.contains_key("group") || parts.contains_key("share") {
            return Err("node= names one node: leave group= and share= out".to_owned());
        }
        let (at, duration) = window(&parts)?;
        return Ok(Disruption {
            kind: Some(Kind::NodeFailure(NodeFailure {
                node: (*node).to_owned(),
                at,
                duration,
                ..NodeFailure::default()
            })),
        });
    }
    let node_group = required(&parts, "group", "NAME")?.to_owned();
    let share = match parts.get("share") {
        None => 1.0,
        Some(given) => {
            let parsed: f64 = given
                .parse()
                .map_err(|_| format!("share {given:?} is not a number"))?;
            if !(parsed > 0.0 && parsed <= 1.0) {
                return Err(format!("share {given} must be in (0, 1]"));
            }
            parsed
        }
    };
    let (at, duration) = window(&parts)?;
    Ok(Disruption {
        kind: Some(Kind::NodeFailure(NodeFailure {
            node_group,
            share,
            at,
            duration,
            node: String::new(),
        })),
    })
}

/// One `--zone-outage zone=ZONE,at=DURATION[,for=DURATION]`.
pub fn parse_zone_outage(value: &str) -> Result<Disruption, String> {
    let parts = parts(value, &["zone", "at", "for"])?;
    let zone = required(&parts, "zone", "ZONE")?.to_owned();
    let (at, duration) = window(&parts)?;
    Ok(Disruption {
        kind: Some(Kind::ZoneOutage(ZoneOutage { zone, at, duration })),
    })
}

/// One `--stockout group=NAME,at=DURATION[,for=DURATION][,instance-type=TYPE]`.
pub fn parse_stockout(value: &str) -> Result<Disruption, String> {
    let parts = parts(value, &["group", "at", "for", "instance-type"])?;
    let node_group = required(&parts, "group", "NAME")?.to_owned();
    let (at, duration) = window(&parts)?;
    Ok(Disruption {
        kind: Some(Kind::Stockout(Stockout {
            node_group,
            at,
            duration,
            instance_type: parts
                .get("instance-type")
                .map_or_else(String::new, |name| (*name).to_owned()),
        })),
    })
}

/// One `--spot-interruption group=NAME,at=DURATION[,notice=DURATION]` (one node at `at`) or
/// `group=NAME,rate=R[,at=DURATION][,for=DURATION][,notice=DURATION]` (each node at R per
/// hour, from `at` for `for`).
pub fn parse_spot_interruption(value: &str) -> Result<Disruption, String> {
    let parts = parts(value, &["group", "at", "rate", "for", "notice"])?;
    let node_group = required(&parts, "group", "NAME")?.to_owned();
    let notice = duration(&parts, "notice")?;
    let spot = match parts.get("rate") {
        Some(given) => {
            let rate: f64 = given
                .parse()
                .map_err(|_| format!("rate {given:?} is not a number"))?;
            if !(rate > 0.0 && rate.is_finite()) {
                return Err(format!("rate {given} must be positive (per node and hour)"));
            }
            SpotInterruption {
                node_group,
                times: Vec::new(),
                rate_per_hour: rate,
                at: duration(&parts, "at")?,
                duration: duration(&parts, "for")?,
                notice,
            }
        }
        None => {
            if parts.contains_key("for") {
                return Err("for= bounds a rate: give rate=R, or at= alone for one node".to_owned());
            }
            let (at, _) = window(&parts)?;
            SpotInterruption {
                node_group,
                times: at.into_iter().collect(),
                rate_per_hour: 0.0,
                at: None,
                duration: None,
                notice,
            }
        }
    };
    Ok(Disruption {
        kind: Some(Kind::SpotInterruption(spot)),
    })
}

/// One `--node-pool-upgrade group=NAME,at=DURATION[,max-surge=N][,max-unavailable=N]
/// [,drain-timeout=DURATION]`.
pub fn parse_node_pool_upgrade(value: &str) -> Result<Disruption, String> {
    let parts = parts(
        value,
        &[
            "group",
            "at",
            "max-surge",
            "max-unavailable",
            "drain-timeout",
        ],
    )?;
    let node_group = required(&parts, "group", "NAME")?.to_owned();
    let (at, _) = window(&parts)?;
    let count = |key: &str| -> Result<Option<u32>, String> {
        parts
            .get(key)
            .map(|given| {
                given
                    .parse::<u32>()
                    .map_err(|_| format!("{key} {given:?} is not a whole number of nodes"))
            })
            .transpose()
    };
    Ok(Disruption {
        kind: Some(Kind::NodePoolUpgrade(NodePoolUpgrade {
            node_group,
            at,
            max_surge: count("max-surge")?,
            max_unavailable: count("max-unavailable")?,
            drain_timeout: duration(&parts, "drain-timeout")?,
        })),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reads_in_recorded_time() {
        let Some(Kind::NodeFailure(failure)) =
            parse_node_failure("group=m5,share=0.5,at=10m,for=5m")
                .unwrap()
                .kind
        else {
            panic!("not a node failure");
        };
        assert_eq!(failure.node_group, "m5");
        assert_eq!(failure.share, 0.5);
        assert_eq!(failure.at.unwrap().seconds, 600);
        assert_eq!(failure.duration.unwrap().seconds, 300);
        let Some(Kind::NodeFailure(all)) = parse_node_failure("at=0s,group=m5").unwrap().kind
        else {
            panic!("not a node failure");
        };
        assert_eq!((all.share, all.duration), (1.0, None));
        let Some(Kind::NodeFailure(one)) = parse_node_failure("node=a-1,at=1m").unwrap().kind
        else {
            panic!("not a node failure");
        };
        assert_eq!((one.node.as_str(), one.node_group.as_str()), ("a-1", ""));
        assert!(
            parse_node_failure("node=a-1,group=a,at=1m")
                .unwrap_err()
                .contains("node= names one node")
        );
    }

    #[test]
    fn zone_outages_and_stockouts_read_their_own_keys() {
        let Some(Kind::ZoneOutage(outage)) = parse_zone_outage("zone=us-east-1a,at=1m,for=10m")
            .unwrap()
            .kind
        else {
            panic!("not a zone outage");
        };
        assert_eq!(outage.zone, "us-east-1a");
        assert_eq!(outage.duration.unwrap().seconds, 600);
        let Some(Kind::Stockout(stockout)) = parse_stockout("group=m5,at=0s").unwrap().kind else {
            panic!("not a stockout");
        };
        assert_eq!(
            (
                stockout.node_group.as_str(),
                stockout.duration,
                stockout.instance_type.as_str()
            ),
            ("m5", None, "")
        );
        let Some(Kind::Stockout(of_type)) =
            parse_stockout("group=general,at=0s,instance-type=m5.large")
                .unwrap()
                .kind
        else {
            panic!("not a stockout");
        };
        assert_eq!(of_type.instance_type, "m5.large");
        assert!(
            parse_zone_outage("zone=a,at=1m,share=0.5")
                .unwrap_err()
                .contains("unknown key \"share\" (keys: zone, at, for)")
        );
        assert!(
            parse_stockout("at=1m")
                .unwrap_err()
                .contains("group=NAME is required")
        );
        assert!(
            parse_zone_outage("zone=a")
                .unwrap_err()
                .contains("at=DURATION is required")
        );
    }

    #[test]
    fn bad_parts_are_named() {
        for (value, expected) in [
            ("at=10m", "group=NAME is required"),
            ("group=m5", "at=DURATION is required"),
            ("group=m5,at=soon", "at \"soon\""),
            ("group=m5,at=1m,share=2", "share 2 must be in (0, 1]"),
            ("group=m5,at=1m,share=x", "share \"x\" is not a number"),
            (
                "group=m5,at=1m,zone=a",
                "unknown key \"zone\" (keys: group, node, at, share, for)",
            ),
            ("group=m5,at=1m,at=2m", "at is given twice"),
            ("group=m5,at", "\"at\" is not KEY=VALUE"),
        ] {
            let error = parse_node_failure(value).unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
        }
    }

    #[test]
    fn a_spot_interruption_is_one_node_at_a_time_or_a_rate() {
        let Some(Kind::SpotInterruption(one)) =
            parse_spot_interruption("group=east,at=5m,notice=30s")
                .unwrap()
                .kind
        else {
            panic!("not a spot interruption");
        };
        assert_eq!(one.node_group, "east");
        assert_eq!(
            one.times.iter().map(|t| t.seconds).collect::<Vec<_>>(),
            [300]
        );
        assert_eq!((one.rate_per_hour, one.notice.unwrap().seconds), (0.0, 30));
        let Some(Kind::SpotInterruption(rate)) =
            parse_spot_interruption("group=east,rate=0.05,for=24h")
                .unwrap()
                .kind
        else {
            panic!("not a spot interruption");
        };
        assert!(rate.times.is_empty());
        assert_eq!((rate.rate_per_hour, rate.at), (0.05, None));
        assert_eq!(rate.duration.unwrap().seconds, 86_400);
        for (value, expected) in [
            ("group=east", "at=DURATION is required"),
            ("group=east,at=1m,for=5m", "for= bounds a rate"),
            ("group=east,rate=fast", "rate \"fast\" is not a number"),
            ("group=east,rate=-1", "rate -1 must be positive"),
            ("rate=1", "group=NAME is required"),
            ("group=east,at=1m,share=1", "unknown key \"share\""),
        ] {
            let error = parse_spot_interruption(value).unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
        }
    }

    #[test]
    fn an_upgrade_reads_its_policy() {
        let Some(Kind::NodePoolUpgrade(upgrade)) = parse_node_pool_upgrade(
            "group=m5,at=2m,max-surge=2,max-unavailable=1,drain-timeout=10m",
        )
        .unwrap()
        .kind
        else {
            panic!("not an upgrade");
        };
        assert_eq!(
            (upgrade.max_surge, upgrade.max_unavailable),
            (Some(2), Some(1))
        );
        assert_eq!(upgrade.drain_timeout.unwrap().seconds, 600);
        let Some(Kind::NodePoolUpgrade(defaults)) =
            parse_node_pool_upgrade("group=m5,at=0s").unwrap().kind
        else {
            panic!("not an upgrade");
        };
        assert_eq!((defaults.max_surge, defaults.drain_timeout), (None, None));
        for (value, expected) in [
            ("group=m5", "at=DURATION is required"),
            (
                "group=m5,at=1m,max-surge=-1",
                "max-surge \"-1\" is not a whole number",
            ),
            ("group=m5,at=1m,for=5m", "unknown key \"for\""),
        ] {
            let error = parse_node_pool_upgrade(value).unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
        }
    }
}
