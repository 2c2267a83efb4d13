//! What the pool's pods use: the figures a kubelet would measure, set from outside (a replay of
//! recorded usage, a test's load curve) and read by whatever serves them (the metrics API).
//!
//! A pod's usage is a CPU rate and a memory working set per container, held until the next
//! set. The meter also integrates the CPU rate into the cumulative CPU-seconds a kubelet's
//! resource endpoint reports, so a reader that takes rates from two cumulative points (as
//! metrics-server does) sees the rate that was set.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use ksim_nodes::names::is_dns_label;

/// Most containers a pod's usage names: as the tracer records it.
pub const MAX_CONTAINERS: usize = 64;
/// A container using more than any machine holds is a mistake, as `ksim trace validate`'s
/// KS007 calls it: 4,096 cores.
pub const MAX_CPU_NANOCORES: u64 = 4_096 * 1_000_000_000;
/// 64 TiB, as above.
pub const MAX_MEMORY_BYTES: u64 = 64 << 40;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("usage names no container")]
    NoContainers,
    #[error("usage names {0} containers; at most {MAX_CONTAINERS} are accepted")]
    TooManyContainers(usize),
    #[error("container name {0:?} is not a DNS label")]
    BadName(String),
    #[error("container {0:?} appears twice")]
    Duplicate(String),
    #[error("container {name:?} uses {nanocores} nanocores; more than 4,096 cores is refused")]
    Cpu { name: String, nanocores: u64 },
    #[error("container {name:?} uses {bytes} bytes of memory; more than 64 TiB is refused")]
    Memory { name: String, bytes: u64 },
}

/// One container's usage as it is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
}

/// One container's usage as it is read at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerReading {
    pub name: String,
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
    /// CPU-seconds used since the meter first saw the container.
    pub cpu_seconds_total: f64,
    /// When the meter first saw the container.
    pub started: Timestamp,
}

#[derive(Debug, Clone)]
struct ContainerMeter {
    usage: ContainerUsage,
    started: Timestamp,
    /// CPU-seconds up to `since`; the current rate runs from there.
    cpu_seconds: f64,
    since: Timestamp,
    /// CPU wanted beyond the container's limit from `since` on, nanocores (`domain::limits`).
    throttled_nanocores: u64,
}

impl ContainerMeter {
    fn fresh(usage: ContainerUsage, now: Timestamp) -> Self {
        ContainerMeter {
            usage,
            started: now,
            cpu_seconds: 0.0,
            since: now,
            throttled_nanocores: 0,
        }
    }

    /// Seconds from `since` to `now`; a clock that went back counts none.
    fn elapsed(&self, now: Timestamp) -> f64 {
        now.duration_since(self.since)
            .max(SignedDuration::ZERO)
            .as_secs_f64()
    }

    fn cpu_seconds_at(&self, now: Timestamp) -> f64 {
        // A clock that went back adds nothing rather than taking CPU back.
        self.cpu_seconds + self.usage.cpu_nanocores as f64 * 1e-9 * self.elapsed(now)
    }

    /// Throttled CPU-seconds from `since` to `now`.
    fn throttled_since(&self, now: Timestamp) -> f64 {
        self.throttled_nanocores as f64 * 1e-9 * self.elapsed(now)
    }
}

/// One pod's usage meter.
#[derive(Debug, Clone)]
pub struct PodMeter {
    containers: Vec<ContainerMeter>,
    updated: Timestamp,
}

/// Checks a pod's usage as a caller sent it: every figure is untrusted.
pub fn validate(containers: &[ContainerUsage]) -> Result<(), UsageError> {
    if containers.is_empty() {
        return Err(UsageError::NoContainers);
    }
    if containers.len() > MAX_CONTAINERS {
        return Err(UsageError::TooManyContainers(containers.len()));
    }
    for (i, container) in containers.iter().enumerate() {
        if !is_dns_label(&container.name) {
            return Err(UsageError::BadName(container.name.clone()));
        }
        if containers[..i].iter().any(|c| c.name == container.name) {
            return Err(UsageError::Duplicate(container.name.clone()));
        }
        if container.cpu_nanocores > MAX_CPU_NANOCORES {
            return Err(UsageError::Cpu {
                name: container.name.clone(),
                nanocores: container.cpu_nanocores,
            });
        }
        if container.memory_bytes > MAX_MEMORY_BYTES {
            return Err(UsageError::Memory {
                name: container.name.clone(),
                bytes: container.memory_bytes,
            });
        }
    }
    Ok(())
}

impl PodMeter {
    /// A meter starting at `now` with `containers`' usage.
    pub fn new(containers: Vec<ContainerUsage>, now: Timestamp) -> Result<Self, UsageError> {
        validate(&containers)?;
        Ok(Self {
            containers: containers
                .into_iter()
                .map(|usage| ContainerMeter::fresh(usage, now))
                .collect(),
            updated: now,
        })
    }

    /// Replaces the usage from `now` on. A container that was metered keeps its CPU-seconds so
    /// far and its start; one no longer named is dropped, as a kubelet drops a gone container.
    pub fn set(
        &mut self,
        containers: Vec<ContainerUsage>,
        now: Timestamp,
    ) -> Result<(), UsageError> {
        self.set_throttled(containers, &[], now).map(drop)
    }

    /// As [`PodMeter::set`], with the CPU each named container wants beyond its limit
    /// (nanocores) from `now` on. Returns the throttled CPU-seconds each container accrued
    /// since the previous set, those with any.
    pub fn set_throttled(
        &mut self,
        containers: Vec<ContainerUsage>,
        throttled: &[(String, u64)],
        now: Timestamp,
    ) -> Result<Vec<(String, f64)>, UsageError> {
        validate(&containers)?;
        let mut previous = std::mem::take(&mut self.containers);
        let accrued = previous
            .iter()
            .map(|meter| (meter.usage.name.clone(), meter.throttled_since(now)))
            .filter(|(_, seconds)| *seconds > 0.0)
            .collect();
        self.containers = containers
            .into_iter()
            .map(|usage| {
                let throttled_nanocores = throttled
                    .iter()
                    .find(|(name, _)| *name == usage.name)
                    .map_or(0, |(_, nanocores)| *nanocores);
                match previous.iter().position(|m| m.usage.name == usage.name) {
                    Some(i) => {
                        let old = previous.swap_remove(i);
                        ContainerMeter {
                            cpu_seconds: old.cpu_seconds_at(now),
                            since: now.max(old.since),
                            started: old.started,
                            usage,
                            throttled_nanocores,
                        }
                    }
                    None => ContainerMeter {
                        throttled_nanocores,
                        ..ContainerMeter::fresh(usage, now)
                    },
                }
            })
            .collect();
        self.updated = now;
        Ok(accrued)
    }

    /// The container starts again at `now`, as after an OOM kill: a new process that has used
    /// nothing yet (its counters start over, as a new container's do) until usage is set again.
    pub fn restart(&mut self, name: &str, now: Timestamp) {
        if let Some(meter) = self.containers.iter_mut().find(|m| m.usage.name == name) {
            let usage = ContainerUsage {
                name: name.to_owned(),
                cpu_nanocores: 0,
                memory_bytes: 0,
            };
            *meter = ContainerMeter::fresh(usage, now);
        }
    }

    /// When the usage was last set.
    pub fn updated(&self) -> Timestamp {
        self.updated
    }

    /// The containers' usage at `now`.
    pub fn read(&self, now: Timestamp) -> Vec<ContainerReading> {
        self.containers
            .iter()
            .map(|meter| ContainerReading {
                name: meter.usage.name.clone(),
                cpu_nanocores: meter.usage.cpu_nanocores,
                memory_bytes: meter.usage.memory_bytes,
                cpu_seconds_total: meter.cpu_seconds_at(now),
                started: meter.started,
            })
            .collect()
    }

    /// The pod's total: CPU nanocores and memory bytes summed over its containers.
    pub fn total(&self) -> (u64, u64) {
        self.containers.iter().fold((0, 0), |(cpu, memory), meter| {
            (
                cpu.saturating_add(meter.usage.cpu_nanocores),
                memory.saturating_add(meter.usage.memory_bytes),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn usage(name: &str, millicores: u64, mebibytes: u64) -> ContainerUsage {
        ContainerUsage {
            name: name.to_owned(),
            cpu_nanocores: millicores * 1_000_000,
            memory_bytes: mebibytes << 20,
        }
    }

    #[test]
    fn cpu_seconds_integrate_the_rate_that_was_set() {
        let mut meter = PodMeter::new(vec![usage("app", 500, 64)], at(0)).expect("valid");
        let reading = meter.read(at(10));
        assert!((reading[0].cpu_seconds_total - 5.0).abs() < 1e-9);
        meter
            .set(vec![usage("app", 2_000, 128)], at(10))
            .expect("valid");
        let reading = meter.read(at(15));
        // 5 s at half a core, then 5 s at two cores.
        assert!((reading[0].cpu_seconds_total - 15.0).abs() < 1e-9);
        assert_eq!(reading[0].memory_bytes, 128 << 20);
        assert_eq!(reading[0].started, at(0));
        assert_eq!(meter.updated(), at(10));
    }

    #[test]
    fn a_new_container_starts_from_zero_and_a_gone_one_is_dropped() {
        let mut meter = PodMeter::new(vec![usage("app", 1_000, 64), usage("log", 100, 8)], at(0))
            .expect("valid");
        meter
            .set(
                vec![usage("app", 1_000, 64), usage("proxy", 200, 16)],
                at(20),
            )
            .expect("valid");
        let reading = meter.read(at(30));
        let names: Vec<&str> = reading.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["app", "proxy"]);
        assert!((reading[0].cpu_seconds_total - 30.0).abs() < 1e-9);
        assert!((reading[1].cpu_seconds_total - 2.0).abs() < 1e-9);
        assert_eq!(reading[1].started, at(20));
        assert_eq!(meter.total(), (1_200_000_000, 80 << 20));
    }

    #[test]
    fn throttled_cpu_accrues_between_sets_and_a_restart_starts_the_container_over() {
        let mut meter = PodMeter::new(vec![usage("app", 200, 64)], at(0)).expect("valid");
        let throttled = [("app".to_owned(), 300_000_000)];
        let accrued = meter
            .set_throttled(vec![usage("app", 200, 64)], &throttled, at(10))
            .expect("valid");
        assert!(accrued.is_empty(), "nothing was throttled before");
        let accrued = meter
            .set_throttled(vec![usage("app", 200, 64)], &[], at(20))
            .expect("valid");
        // 10 s wanting 0.3 cores more than the limit.
        assert_eq!(accrued.len(), 1);
        assert!((accrued[0].1 - 3.0).abs() < 1e-9);
        let accrued = meter
            .set_throttled(vec![usage("app", 200, 64)], &[], at(30))
            .expect("valid");
        assert!(accrued.is_empty());
        meter.restart("app", at(30));
        let reading = meter.read(at(40));
        assert_eq!((reading[0].cpu_nanocores, reading[0].memory_bytes), (0, 0));
        assert_eq!(reading[0].cpu_seconds_total, 0.0);
        assert_eq!(reading[0].started, at(30));
    }

    #[test]
    fn a_clock_that_goes_back_takes_no_cpu_back() {
        let meter = PodMeter::new(vec![usage("app", 1_000, 64)], at(10)).expect("valid");
        assert_eq!(meter.read(at(5))[0].cpu_seconds_total, 0.0);
    }

    #[test]
    fn bad_usage_is_refused_by_name() {
        let cases = [
            (vec![], UsageError::NoContainers),
            (
                vec![usage("App", 1, 1)],
                UsageError::BadName("App".to_owned()),
            ),
            (
                vec![usage("app", 1, 1), usage("app", 2, 2)],
                UsageError::Duplicate("app".to_owned()),
            ),
            (
                vec![usage("app", 4_096_001, 1)],
                UsageError::Cpu {
                    name: "app".to_owned(),
                    nanocores: 4_096_001_000_000,
                },
            ),
            (
                vec![ContainerUsage {
                    name: "app".to_owned(),
                    cpu_nanocores: 1,
                    memory_bytes: (64 << 40) + 1,
                }],
                UsageError::Memory {
                    name: "app".to_owned(),
                    bytes: (64 << 40) + 1,
                },
            ),
        ];
        for (containers, expected) in cases {
            assert_eq!(PodMeter::new(containers, at(0)).err(), Some(expected));
        }
        let many: Vec<ContainerUsage> = (0..65).map(|i| usage(&format!("c{i}"), 1, 1)).collect();
        assert_eq!(validate(&many), Err(UsageError::TooManyContainers(65)));
        // A refused set leaves the meter as it was.
        let mut meter = PodMeter::new(vec![usage("app", 1_000, 64)], at(0)).expect("valid");
        assert!(meter.set(vec![], at(5)).is_err());
        assert_eq!(meter.read(at(10))[0].cpu_nanocores, 1_000_000_000);
    }
}
