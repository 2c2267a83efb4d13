//! `--node-failure`: a disruption of the run, given as `group=NAME,at=DURATION[,share=S][,for=DURATION]`
//! in recorded time. The driver checks it against the run's groups; here only its form.

use std::time::Duration;

use ksim_proto::ksim::driver::v1::{Disruption, NodeFailure, disruption::Kind};

/// Parses one `--node-failure` value; errors name the part that is wrong.
pub fn parse_node_failure(value: &str) -> Result<Disruption, String> {
    let (mut group, mut at, mut share, mut lasts) = (None, None, None, None);
    for part in value.split(',') {
        let (key, given) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not KEY=VALUE (keys: group, at, share, for)"))?;
        let duration = |what: &str| -> Result<Duration, String> {
            humantime::parse_duration(given)
                .map_err(|error| format!("{what} {given:?}: {error} (e.g. 10m, 90s)"))
        };
        let repeated = |key: &str| format!("{key} is given twice");
        match key {
            "group" if group.is_none() => group = Some(given.to_owned()),
            "at" if at.is_none() => at = Some(duration("at")?),
            "for" if lasts.is_none() => lasts = Some(duration("for")?),
            "share" if share.is_none() => {
                let parsed: f64 = given
                    .parse()
                    .map_err(|_| format!("share {given:?} is not a number"))?;
                if !(parsed > 0.0 && parsed <= 1.0) {
                    return Err(format!("share {given} must be in (0, 1]"));
                }
                share = Some(parsed);
            }
            "group" | "at" | "for" | "share" => return Err(repeated(key)),
            other => {
                return Err(format!(
                    "unknown key {other:?} (keys: group, at, share, for)"
                ));
            }
        }
    }
    let node_group = group.ok_or("group=NAME is required")?;
    let at = at.ok_or("at=DURATION is required (recorded time since the replay's start)")?;
    let proto =
        |d: Duration| prost_types::Duration::try_from(d).map_err(|_| format!("{d:?} is too long"));
    Ok(Disruption {
        kind: Some(Kind::NodeFailure(NodeFailure {
            node_group,
            share: share.unwrap_or(1.0),
            at: Some(proto(at)?),
            duration: lasts.map(proto).transpose()?,
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
    }

    #[test]
    fn bad_parts_are_named() {
        for (value, expected) in [
            ("at=10m", "group=NAME is required"),
            ("group=m5", "at=DURATION is required"),
            ("group=m5,at=soon", "at \"soon\""),
            ("group=m5,at=1m,share=2", "share 2 must be in (0, 1]"),
            ("group=m5,at=1m,share=x", "share \"x\" is not a number"),
            ("group=m5,at=1m,zone=a", "unknown key \"zone\""),
            ("group=m5,at=1m,at=2m", "at is given twice"),
            ("group=m5,at", "\"at\" is not KEY=VALUE"),
        ] {
            let error = parse_node_failure(value).unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
        }
    }
}
