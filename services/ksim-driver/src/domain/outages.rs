//! cluster-autoscaler's outages, as the environment lists them (times), into the report's
//! observations (wall-clock offsets since the replay start).

use std::time::Duration;

use ksim_proto::ksim::env::v1 as env;
use ksim_trace::time::millis;

use super::report::ObservedOutage;

/// Offsets since `started_at_ms`. An outage begun before the start counts from it; an up time
/// before the down time (a clock stepped back) is the down time. One without a down time (the
/// environment always sets it) is left out: where it began is unknown.
pub fn since_start(started_at_ms: i64, outages: &[env::AutoscalerOutage]) -> Vec<ObservedOutage> {
    let offset = |ms: i64| {
        Duration::from_millis(u64::try_from(ms.saturating_sub(started_at_ms)).unwrap_or(0))
    };
    outages
        .iter()
        .filter_map(|outage| {
            let down = offset(millis(outage.down_time.as_ref()?));
            let up = outage
                .up_time
                .as_ref()
                .map(|up| offset(millis(up)).max(down));
            Some(ObservedOutage { down, up })
        })
        .collect()
}

/// The cloud provider's outages (wall-clock offsets, from [`since_start`]) as the report's
/// warnings, one each, in recorded time: cluster-autoscaler could neither read nor resize node
/// groups then, so its decisions in that span are not what the recorded cluster's would be.
pub fn provider_warnings(outages: &[ObservedOutage], speed: f64) -> Vec<String> {
    let recorded = |d: Duration| {
        let d = d.mul_f64(speed.max(0.0));
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    };
    outages
        .iter()
        .map(|outage| {
            let how_long = match outage.up {
                Some(up) => format!("for {}", recorded(up.saturating_sub(outage.down))),
                None => "until the end".to_owned(),
            };
            format!(
                "the cloud provider (ksim-cloudprov) was down {} into the replay, {how_long} \
                 (recorded time): it had exited and the environment had not yet started it \
                 again, so cluster-autoscaler could neither read nor resize node groups then",
                recorded(outage.down)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use ksim_trace::time::timestamp;

    use super::*;

    #[test]
    fn each_provider_outage_is_a_warning_in_recorded_time() {
        let warnings = provider_warnings(
            &[
                ObservedOutage {
                    down: Duration::from_secs(6),
                    up: Some(Duration::from_millis(7_500)),
                },
                ObservedOutage {
                    down: Duration::from_secs(30),
                    up: None,
                },
            ],
            10.0,
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with(
                "the cloud provider (ksim-cloudprov) was down 1m into the replay, for 15s "
            ),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[1].contains("was down 5m into the replay, until the end"),
            "{}",
            warnings[1]
        );
    }

    #[test]
    fn outages_are_offsets_from_the_start_and_one_begun_before_counts_from_it() {
        let outage = |down, up: Option<i64>| env::AutoscalerOutage {
            down_time: Some(timestamp(down)),
            up_time: up.map(timestamp),
        };
        let outages = [
            outage(9_000, Some(12_500)),
            outage(20_000, Some(19_000)),
            outage(30_000, None),
            env::AutoscalerOutage::default(),
        ];
        let ms = Duration::from_millis;
        assert_eq!(
            since_start(10_000, &outages),
            [
                ObservedOutage {
                    down: ms(0),
                    up: Some(ms(2_500)),
                },
                ObservedOutage {
                    down: ms(10_000),
                    up: Some(ms(10_000)),
                },
                ObservedOutage {
                    down: ms(20_000),
                    up: None,
                },
            ]
        );
    }
}
