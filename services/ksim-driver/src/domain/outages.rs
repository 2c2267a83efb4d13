//! cluster-autoscaler's outages, as the environment lists them (times), into the report's
//! observations (wall-clock offsets since the replay start).

use std::time::Duration;

use ksim_proto::ksim::env::v1 as env;
use ksim_trace::time::millis;

use super::report::AutoscalerOutage;

/// Offsets since `started_at_ms`. An outage begun before the start counts from it; an up time
/// before the down time (a clock stepped back) is the down time. One without a down time (the
/// environment always sets it) is left out: where it began is unknown.
pub fn since_start(started_at_ms: i64, outages: &[env::AutoscalerOutage]) -> Vec<AutoscalerOutage> {
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
            Some(AutoscalerOutage { down, up })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use ksim_trace::time::timestamp;

    use super::*;

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
                AutoscalerOutage {
                    down: ms(0),
                    up: Some(ms(2_500)),
                },
                AutoscalerOutage {
                    down: ms(10_000),
                    up: Some(ms(10_000)),
                },
                AutoscalerOutage {
                    down: ms(20_000),
                    up: None,
                },
            ]
        );
    }
}
