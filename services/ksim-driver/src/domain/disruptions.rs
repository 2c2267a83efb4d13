//! Disruptions injected into a replay (docs/disruptions.md): checked whole before anything
//! starts, scheduled in wall-clock time at the run's speed, and the nodes each takes chosen
//! by the run's seed.

use std::time::Duration;

use ksim_proto::ksim::driver::v1 as pb;

/// Latest a disruption may begin or last, in recorded time: a year, the longest replay a spec
/// may ask for.
const MAX_OFFSET: Duration = Duration::from_secs(365 * 24 * 3600);

/// A disruption refused, naming the field (`domain::spec` makes it a spec error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Invalid {
    pub field: String,
    pub problem: String,
}

/// A node failure that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFailure {
    pub group: String,
    /// The one node it takes, by name; `None`: `share` of the group.
    pub node: Option<String>,
    /// In (0, 1].
    pub share: f64,
    /// Recorded time since the replay's start.
    pub at: Duration,
    /// Recorded time the nodes stay down; `None`: to the end of the run.
    pub duration: Option<Duration>,
}

/// A zone outage that passed every check, with the groups it hits.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneOutage {
    pub zone: String,
    /// The spec's groups in the zone: their nodes fail.
    pub groups: Vec<String>,
    /// Those of them cluster-autoscaler resizes: no capacity for them meanwhile.
    pub autoscaled: Vec<String>,
    /// The spec's Karpenter NodePools: their nodes in the zone fail, and their offerings there
    /// are withdrawn meanwhile.
    pub node_pools: Vec<String>,
    pub at: Duration,
    pub duration: Option<Duration>,
}

/// A stockout that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct Stockout {
    pub group: String,
    /// A NodePool's: its offerings withdrawn (those of `instance_type` only, when given);
    /// otherwise a group cluster-autoscaler resizes.
    pub node_pool: bool,
    pub instance_type: Option<String>,
    pub at: Duration,
    pub duration: Option<Duration>,
}

/// A spot interruption that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct SpotInterruption {
    pub group: String,
    /// A NodePool's: only its spot nodes (`karpenter.sh/capacity-type=spot`) are interrupted.
    pub node_pool: bool,
    pub when: Interruptions,
    /// Recorded time from the notice to the instance's end.
    pub notice: Duration,
}

/// When a spot interruption's nodes are reclaimed.
#[derive(Debug, Clone, PartialEq)]
pub enum Interruptions {
    /// One node at each, in recorded time, in order.
    Times(Vec<Duration>),
    /// Each Ready node at this rate per recorded hour, drawn each [`RATE_TICK`], from `at` for
    /// `duration` (`None`: to the end of the run).
    Rate {
        per_hour: f64,
        at: Duration,
        duration: Option<Duration>,
    },
}

/// How often a rate's draw is made, in recorded time.
pub const RATE_TICK: Duration = Duration::from_secs(60);

/// Most interruption times one disruption may list.
const MAX_TIMES: usize = 10_000;

/// Highest rate per node and hour: one every six minutes on average.
const MAX_RATE: f64 = 10.0;

/// A cloud's notice before it reclaims a spot instance: AWS gives two minutes.
const DEFAULT_NOTICE: Duration = Duration::from_secs(120);

const MAX_NOTICE: Duration = Duration::from_secs(3600);

/// A node-pool upgrade that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePoolUpgrade {
    pub group: String,
    pub at: Duration,
    pub max_surge: u32,
    pub max_unavailable: u32,
    /// Recorded time a node's drain may take.
    pub drain_timeout: Duration,
}

/// GKE waits an hour for a node's drain in an upgrade.
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(3600);

const MAX_DRAIN_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Most nodes an upgrade may add or take below the group's size at once.
const MAX_UPGRADE_BATCH: u32 = 1000;

/// A spot interruption's kind in reports: one outcome per node it took.
pub const SPOT_INTERRUPTION: &str = "spot-interruption";

/// Offerings of a Karpenter NodePool a disruption withdraws while it lasts: those matching
/// every field given (an empty one matches any). ksim's Karpenter provider reads them from a
/// ConfigMap (deploy/karpenter/provider), in these field names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Withdrawal {
    pub node_pool: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub instance_type: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub zone: String,
    /// Why, for the insufficient-capacity error Karpenter publishes.
    pub reason: String,
}

/// A disruption that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub enum Disruption {
    NodeFailure(NodeFailure),
    ZoneOutage(ZoneOutage),
    Stockout(Stockout),
    SpotInterruption(SpotInterruption),
    /// A failure the recording observed: one node of the group fails.
    Recorded(super::recorded_failures::RecordedFailure),
    NodePoolUpgrade(NodePoolUpgrade),
}

impl Disruption {
    /// The kind's name in reports and flags.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NodeFailure(_) => "node-failure",
            Self::ZoneOutage(_) => "zone-outage",
            Self::Stockout(_) => "stockout",
            Self::SpotInterruption(_) => SPOT_INTERRUPTION,
            Self::Recorded(_) => "recorded-failure",
            Self::NodePoolUpgrade(_) => "node-pool-upgrade",
        }
    }

    /// The group it hits; a zone outage's groups and NodePools, comma-separated.
    pub fn group(&self) -> String {
        match self {
            Self::NodeFailure(failure) => failure.group.clone(),
            Self::ZoneOutage(outage) => {
                let hit: Vec<&str> = outage
                    .groups
                    .iter()
                    .chain(&outage.node_pools)
                    .map(String::as_str)
                    .collect();
                hit.join(",")
            }
            Self::Stockout(stockout) => stockout.group.clone(),
            Self::SpotInterruption(spot) => spot.group.clone(),
            Self::Recorded(failure) => failure.group.clone(),
            Self::NodePoolUpgrade(upgrade) => upgrade.group.clone(),
        }
    }

    /// The NodePool offerings it withdraws while it lasts.
    pub fn withdrawals(&self) -> Vec<Withdrawal> {
        match self {
            Self::ZoneOutage(outage) => outage
                .node_pools
                .iter()
                .map(|node_pool| Withdrawal {
                    node_pool: node_pool.clone(),
                    instance_type: String::new(),
                    zone: outage.zone.clone(),
                    reason: format!("zone {} outage", outage.zone),
                })
                .collect(),
            Self::Stockout(out) if out.node_pool => vec![Withdrawal {
                node_pool: out.group.clone(),
                instance_type: out.instance_type.clone().unwrap_or_default(),
                zone: String::new(),
                reason: match &out.instance_type {
                    Some(name) => format!("stockout of {name}"),
                    None => "stockout".to_owned(),
                },
            }],
            _ => Vec::new(),
        }
    }

    /// The zone of a zone outage; empty for the other kinds.
    pub fn zone(&self) -> &str {
        match self {
            Self::ZoneOutage(outage) => &outage.zone,
            Self::NodeFailure(_)
            | Self::Stockout(_)
            | Self::SpotInterruption(_)
            | Self::Recorded(_)
            | Self::NodePoolUpgrade(_) => "",
        }
    }

    /// A recorded failure's node in the recording; empty for the other kinds.
    pub fn recorded_node(&self) -> &str {
        match self {
            Self::Recorded(failure) => &failure.node,
            _ => "",
        }
    }

    pub fn at(&self) -> Duration {
        match self {
            Self::NodeFailure(failure) => failure.at,
            Self::ZoneOutage(outage) => outage.at,
            Self::Stockout(stockout) => stockout.at,
            Self::SpotInterruption(spot) => match &spot.when {
                Interruptions::Times(times) => times.first().copied().unwrap_or_default(),
                Interruptions::Rate { at, .. } => *at,
            },
            Self::Recorded(failure) => failure.at,
            Self::NodePoolUpgrade(upgrade) => upgrade.at,
        }
    }

    /// How long it lasts; `None`: to the end of the run.
    pub fn duration(&self) -> Option<Duration> {
        match self {
            Self::NodeFailure(failure) => failure.duration,
            Self::ZoneOutage(outage) => outage.duration,
            Self::Stockout(stockout) => stockout.duration,
            Self::SpotInterruption(spot) => match &spot.when {
                // Each node's notice is its own; the draws play on their own.
                Interruptions::Times(_) => None,
                Interruptions::Rate { duration, .. } => *duration,
            },
            Self::Recorded(failure) => failure.duration,
            // Not known before it runs.
            Self::NodePoolUpgrade(_) => None,
        }
    }
}

/// What a check needs to know of one of the spec's node groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupFacts<'a> {
    pub name: &'a str,
    /// Its skeleton's `topology.kubernetes.io/zone`; `None` for a NodePool (Karpenter picks
    /// zones per node) or a skeleton without one.
    pub zone: Option<&'a str>,
    pub kind: GroupKind,
    /// A fixed-size group's node count (its nodes are `<name>-0` on); `None` for the others.
    pub size: Option<u32>,
}

/// Who sizes a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    /// Fixed size: the pool's.
    Pool,
    /// cluster-autoscaler resizes it.
    Autoscaled,
    /// A Karpenter NodePool.
    NodePool,
}

fn invalid(field: String, problem: impl Into<String>) -> Invalid {
    Invalid {
        field,
        problem: problem.into(),
    }
}

/// Checks every disruption of a spec against its node groups, naming the field of the first
/// that is wrong.
pub fn from_proto(
    given: &[pb::Disruption],
    groups: &[GroupFacts<'_>],
) -> Result<Vec<Disruption>, Invalid> {
    let mut upgraded: Vec<(&str, usize)> = Vec::new();
    for (index, disruption) in given.iter().enumerate() {
        if let Some(pb::disruption::Kind::NodePoolUpgrade(upgrade)) = &disruption.kind {
            if let Some((_, first)) = upgraded
                .iter()
                .find(|(group, _)| *group == upgrade.node_group)
            {
                return Err(invalid(
                    format!("spec.disruptions[{index}].node_pool_upgrade.node_group"),
                    format!(
                        "{:?} is upgraded by spec.disruptions[{first}] already: upgrades of one \
                         group would overlap (how long one takes is not known before it runs)",
                        upgrade.node_group
                    ),
                ));
            }
            upgraded.push((&upgrade.node_group, index));
        }
    }
    given
        .iter()
        .enumerate()
        .map(|(index, disruption)| {
            let field = format!("spec.disruptions[{index}]");
            match &disruption.kind {
                Some(pb::disruption::Kind::NodeFailure(failure)) => {
                    node_failure(failure, groups, &format!("{field}.node_failure"))
                        .map(Disruption::NodeFailure)
                }
                Some(pb::disruption::Kind::ZoneOutage(outage)) => {
                    zone_outage(outage, groups, &format!("{field}.zone_outage"))
                        .map(Disruption::ZoneOutage)
                }
                Some(pb::disruption::Kind::Stockout(stockout)) => {
                    self::stockout(stockout, groups, &format!("{field}.stockout"))
                        .map(Disruption::Stockout)
                }
                Some(pb::disruption::Kind::SpotInterruption(spot)) => {
                    spot_interruption(spot, groups, &format!("{field}.spot_interruption"))
                        .map(Disruption::SpotInterruption)
                }
                Some(pb::disruption::Kind::NodePoolUpgrade(upgrade)) => {
                    node_pool_upgrade(upgrade, groups, &format!("{field}.node_pool_upgrade"))
                        .map(Disruption::NodePoolUpgrade)
                }
                None => Err(invalid(
                    field,
                    "set node_failure, zone_outage, stockout, spot_interruption or \
                     node_pool_upgrade",
                )),
            }
        })
        .collect()
}

/// The group named, or an error listing the spec's.
fn known_group<'a>(
    name: &str,
    groups: &'a [GroupFacts<'a>],
    field: &str,
) -> Result<&'a GroupFacts<'a>, Invalid> {
    groups
        .iter()
        .find(|group| group.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = groups.iter().map(|group| group.name).collect();
            invalid(
                format!("{field}.node_group"),
                if known.is_empty() {
                    format!("{name:?} is not a node group of the spec, which has none")
                } else {
                    format!(
                        "{name:?} is not a node group of the spec (it has {})",
                        known.join(", ")
                    )
                },
            )
        })
}

/// `at` and `duration` of a disruption, checked.
fn window(
    at: Option<prost_types::Duration>,
    duration: Option<prost_types::Duration>,
    field: &str,
) -> Result<(Duration, Option<Duration>), Invalid> {
    let offset = |name: &str, value: Option<prost_types::Duration>, zero_ok: bool| {
        value
            .map(|value| {
                Duration::try_from(value)
                    .ok()
                    .filter(|d| (zero_ok || !d.is_zero()) && *d <= MAX_OFFSET)
                    .ok_or_else(|| {
                        invalid(
                            format!("{field}.{name}"),
                            format!(
                                "must be {} and at most {} days",
                                if zero_ok { "non-negative" } else { "positive" },
                                MAX_OFFSET.as_secs() / 86_400
                            ),
                        )
                    })
            })
            .transpose()
    };
    Ok((
        offset("at", at, true)?.unwrap_or_default(),
        offset("duration", duration, false)?,
    ))
}

/// The fixed-size group `node` is a node of, by the pool's names (`<group>-<index>`).
fn group_of_named<'a>(node: &str, groups: &'a [GroupFacts<'a>]) -> Option<&'a GroupFacts<'a>> {
    groups.iter().find(|group| {
        let Some(size) = group.size else {
            return false;
        };
        node.strip_prefix(group.name)
            .and_then(|rest| rest.strip_prefix('-'))
            .filter(|digits| digits == &"0" || !digits.starts_with('0'))
            .and_then(|digits| digits.parse::<u32>().ok())
            .is_some_and(|index| index < size)
    })
}

fn node_failure(
    given: &pb::NodeFailure,
    groups: &[GroupFacts<'_>],
    field: &str,
) -> Result<NodeFailure, Invalid> {
    if !given.node.is_empty() {
        if !given.node_group.is_empty() || given.share != 0.0 {
            return Err(invalid(
                format!("{field}.node"),
                "a node by name, or node_group and share: not both",
            ));
        }
        let group = group_of_named(&given.node, groups).ok_or_else(|| {
            let named: Vec<String> = groups
                .iter()
                .filter_map(|group| {
                    group
                        .size
                        .filter(|size| *size > 0)
                        .map(|size| format!("{}-0..{}-{}", group.name, group.name, size - 1))
                })
                .collect();
            invalid(
                format!("{field}.node"),
                format!(
                    "{:?} is none of the run's named nodes ({}; the nodes of autoscaler groups \
                     and NodePools are named when they come)",
                    given.node,
                    if named.is_empty() {
                        "it has no fixed-size group".to_owned()
                    } else {
                        named.join(", ")
                    }
                ),
            )
        })?;
        let (at, duration) = window(given.at, given.duration, field)?;
        return Ok(NodeFailure {
            group: group.name.to_owned(),
            node: Some(given.node.clone()),
            share: 1.0,
            at,
            duration,
        });
    }
    known_group(&given.node_group, groups, field)?;
    let share = match given.share {
        0.0 => 1.0,
        share if share > 0.0 && share <= 1.0 => share,
        share => {
            return Err(invalid(
                format!("{field}.share"),
                format!("must be in (0, 1] (0 means 1), got {share}"),
            ));
        }
    };
    let (at, duration) = window(given.at, given.duration, field)?;
    Ok(NodeFailure {
        group: given.node_group.clone(),
        node: None,
        share,
        at,
        duration,
    })
}

fn zone_outage(
    given: &pb::ZoneOutage,
    groups: &[GroupFacts<'_>],
    field: &str,
) -> Result<ZoneOutage, Invalid> {
    let in_zone: Vec<&GroupFacts<'_>> = groups
        .iter()
        .filter(|group| group.zone == Some(given.zone.as_str()))
        .collect();
    let node_pools: Vec<String> = groups
        .iter()
        .filter(|group| group.kind == GroupKind::NodePool)
        .map(|group| group.name.to_owned())
        .collect();
    // A NodePool's zones are its instance types', which Karpenter knows and the spec does not:
    // with one, any zone a label may name is taken.
    if in_zone.is_empty() && (node_pools.is_empty() || !is_label_value(&given.zone)) {
        let mut zones: Vec<&str> = groups.iter().filter_map(|group| group.zone).collect();
        zones.sort_unstable();
        zones.dedup();
        return Err(invalid(
            format!("{field}.zone"),
            format!(
                "{:?} is the zone of none of the spec's node groups (their skeletons' \
                 topology.kubernetes.io/zone: {}{})",
                given.zone,
                if zones.is_empty() {
                    "none".to_owned()
                } else {
                    zones.join(", ")
                },
                if node_pools.is_empty() {
                    ""
                } else {
                    "; a NodePool's zone is a label value"
                }
            ),
        ));
    }
    let (at, duration) = window(given.at, given.duration, field)?;
    Ok(ZoneOutage {
        zone: given.zone.clone(),
        groups: in_zone.iter().map(|group| group.name.to_owned()).collect(),
        autoscaled: in_zone
            .iter()
            .filter(|group| group.kind == GroupKind::Autoscaled)
            .map(|group| group.name.to_owned())
            .collect(),
        node_pools,
        at,
        duration,
    })
}

/// Whether `value` can be a label's value: 63 characters at most, alphanumerics with `-`, `_`
/// and `.` between.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    !value.is_empty()
        && value.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The named group when cluster-autoscaler resizes it; `what` is the disruption, for the
/// message.
fn autoscaled_group(
    name: &str,
    groups: &[GroupFacts<'_>],
    field: &str,
    what: &str,
) -> Result<(), Invalid> {
    let group = known_group(name, groups, field)?;
    let problem = match group.kind {
        GroupKind::Autoscaled => return Ok(()),
        GroupKind::Pool => format!(
            "{name:?} is a fixed-size group, which nothing replaces or scales up: {what} is of a \
             group cluster-autoscaler resizes"
        ),
        GroupKind::NodePool => {
            format!("{name:?} is a Karpenter NodePool: its {what}s are not modelled yet")
        }
    };
    Err(invalid(format!("{field}.node_group"), problem))
}

fn stockout(
    given: &pb::Stockout,
    groups: &[GroupFacts<'_>],
    field: &str,
) -> Result<Stockout, Invalid> {
    let node_pool = node_pool_or_autoscaled(&given.node_group, groups, field, "a stockout")?;
    let instance_type = match (given.instance_type.as_str(), node_pool) {
        ("", _) => None,
        (name, true) if is_label_value(name) => Some(name.to_owned()),
        (name, true) => {
            return Err(invalid(
                format!("{field}.instance_type"),
                format!("{name:?} cannot be an instance type's name (a label value)"),
            ));
        }
        (_, false) => {
            return Err(invalid(
                format!("{field}.instance_type"),
                "a stockout of an instance type is of a NodePool's offerings: a group of \
                 cluster-autoscaler's has one type, stocked out whole",
            ));
        }
    };
    let (at, duration) = window(given.at, given.duration, field)?;
    Ok(Stockout {
        group: given.node_group.clone(),
        node_pool,
        instance_type,
        at,
        duration,
    })
}

/// Whether the named group is a Karpenter NodePool (else cluster-autoscaler resizes it); a
/// fixed-size group is refused: nothing would replace what `what` takes.
fn node_pool_or_autoscaled(
    name: &str,
    groups: &[GroupFacts<'_>],
    field: &str,
    what: &str,
) -> Result<bool, Invalid> {
    match known_group(name, groups, field)?.kind {
        GroupKind::NodePool => Ok(true),
        GroupKind::Autoscaled => Ok(false),
        GroupKind::Pool => Err(invalid(
            format!("{field}.node_group"),
            format!(
                "{name:?} is a fixed-size group, which nothing replaces or scales up: {what} is \
                 of a group cluster-autoscaler resizes or a Karpenter NodePool"
            ),
        )),
    }
}

fn spot_interruption(
    given: &pb::SpotInterruption,
    groups: &[GroupFacts<'_>],
    field: &str,
) -> Result<SpotInterruption, Invalid> {
    let node_pool =
        node_pool_or_autoscaled(&given.node_group, groups, field, "a spot interruption")?;
    let when = match (given.times.is_empty(), given.rate_per_hour) {
        (false, rate) if rate != 0.0 => {
            return Err(invalid(
                format!("{field}.rate_per_hour"),
                "set times or rate_per_hour, not both",
            ));
        }
        (false, _) => {
            if given.at.is_some() || given.duration.is_some() {
                return Err(invalid(
                    format!("{field}.at"),
                    "at and duration bound a rate: with times, leave them unset",
                ));
            }
            if given.times.len() > MAX_TIMES {
                return Err(invalid(
                    format!("{field}.times"),
                    format!("at most {MAX_TIMES}, got {}", given.times.len()),
                ));
            }
            let mut times = given
                .times
                .iter()
                .enumerate()
                .map(|(index, time)| {
                    window(Some(*time), None, &format!("{field}.times[{index}]"))
                        .map(|(at, _)| at)
                        .map_err(|error| Invalid {
                            field: format!("{field}.times[{index}]"),
                            problem: error.problem,
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            times.sort_unstable();
            Interruptions::Times(times)
        }
        (true, rate) if rate > 0.0 && rate <= MAX_RATE => {
            let (at, duration) = window(given.at, given.duration, field)?;
            Interruptions::Rate {
                per_hour: rate,
                at,
                duration,
            }
        }
        (true, 0.0) => {
            return Err(invalid(
                format!("{field}.times"),
                "set times or rate_per_hour",
            ));
        }
        (true, rate) => {
            return Err(invalid(
                format!("{field}.rate_per_hour"),
                format!("must be in (0, {MAX_RATE}] per node and hour, got {rate}"),
            ));
        }
    };
    let notice = match given.notice {
        None => DEFAULT_NOTICE,
        Some(notice) => Duration::try_from(notice)
            .ok()
            .filter(|notice| !notice.is_zero() && *notice <= MAX_NOTICE)
            .ok_or_else(|| {
                invalid(
                    format!("{field}.notice"),
                    "must be positive and at most an hour",
                )
            })?,
    };
    Ok(SpotInterruption {
        group: given.node_group.clone(),
        node_pool,
        when,
        notice,
    })
}

fn node_pool_upgrade(
    given: &pb::NodePoolUpgrade,
    groups: &[GroupFacts<'_>],
    field: &str,
) -> Result<NodePoolUpgrade, Invalid> {
    autoscaled_group(&given.node_group, groups, field, "a node-pool upgrade")?;
    let (at, _) = window(given.at, None, field)?;
    let max_surge = given.max_surge.unwrap_or(1);
    let max_unavailable = given.max_unavailable.unwrap_or(0);
    for (name, value) in [
        ("max_surge", max_surge),
        ("max_unavailable", max_unavailable),
    ] {
        if value > MAX_UPGRADE_BATCH {
            return Err(invalid(
                format!("{field}.{name}"),
                format!("at most {MAX_UPGRADE_BATCH}, got {value}"),
            ));
        }
    }
    if max_surge == 0 && max_unavailable == 0 {
        return Err(invalid(
            format!("{field}.max_unavailable"),
            "max_surge and max_unavailable are both 0: no node could ever be replaced",
        ));
    }
    let drain_timeout = match given.drain_timeout {
        None => DEFAULT_DRAIN_TIMEOUT,
        Some(timeout) => Duration::try_from(timeout)
            .ok()
            .filter(|timeout| !timeout.is_zero() && *timeout <= MAX_DRAIN_TIMEOUT)
            .ok_or_else(|| {
                invalid(
                    format!("{field}.drain_timeout"),
                    "must be positive and at most a day",
                )
            })?,
    };
    Ok(NodePoolUpgrade {
        group: given.node_group.clone(),
        at,
        max_surge,
        max_unavailable,
        drain_timeout,
    })
}

/// An upgrade's plan for the `removed`-th of its `old` nodes: replaced by a new one, or, for
/// the last `max_surge`, retired (the surge given back, so the group ends at its size).
pub fn retires(removed: usize, old: usize, max_surge: u32) -> bool {
    removed + (max_surge as usize) >= old
}

/// How many Ready nodes the group needs before an upgrade takes a batch of `batch` of its
/// `size` nodes at the start: after the batch goes, no fewer than `size - max_unavailable`.
pub fn ready_needed(size: usize, batch: usize, max_unavailable: u32) -> usize {
    (size + batch).saturating_sub(max_unavailable as usize)
}

/// The chance a node is interrupted in one [`RATE_TICK`] at `per_hour`.
pub fn tick_probability(per_hour: f64) -> f64 {
    1.0 - (-per_hour * RATE_TICK.as_secs_f64() / 3600.0).exp()
}

/// The nodes a rate interrupts at its `tick`-th draw: each of `nodes` (oldest first) whose
/// draw, decided by the seed, the disruption's index, the tick and its place, falls under
/// `probability`. The same seed interrupts the same places at the same ticks.
pub fn drawn(
    seed: u64,
    index: usize,
    tick: u64,
    nodes: &[String],
    probability: f64,
) -> Vec<String> {
    nodes
        .iter()
        .enumerate()
        .filter(|&(place, _)| {
            let draw = mix(seed ^ mix(index as u64) ^ mix(tick ^ 0x5107) ^ mix(place as u64));
            // The top 53 bits as a uniform draw in [0, 1).
            ((draw >> 11) as f64) / ((1_u64 << 53) as f64) < probability
        })
        .map(|(_, node)| node.clone())
        .collect()
}

/// The node the `event`-th of a disruption's times interrupts among `nodes` (oldest first),
/// decided by the seed; `None` when there is none.
pub fn picked(seed: u64, index: usize, event: usize, nodes: &[String]) -> Option<String> {
    if nodes.is_empty() {
        return None;
    }
    let draw = mix(seed ^ mix(index as u64) ^ mix(event as u64 ^ 0x7a11));
    nodes.get((draw % nodes.len() as u64) as usize).cloned()
}

/// One draw of a spot interruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draw {
    /// The `n`-th of its times: one node ([`picked`]).
    Time(usize),
    /// The `n`-th tick of its rate: each node by chance ([`drawn`]).
    Tick(u64),
}

/// A spot interruption's draws in recorded time since the replay's start, in order: each of
/// its times, or each tick of its rate within its window (without end when it has none).
pub fn draws(when: &Interruptions) -> Box<dyn Iterator<Item = (Duration, Draw)> + Send + '_> {
    match when {
        Interruptions::Times(times) => Box::new(
            times
                .iter()
                .enumerate()
                .map(|(event, at)| (*at, Draw::Time(event))),
        ),
        Interruptions::Rate { at, duration, .. } => {
            let (at, end) = (*at, duration.map(|lasts| at.saturating_add(lasts)));
            Box::new(
                (0_u64..)
                    .map(move |tick| {
                        let offset = u32::try_from(tick).unwrap_or(u32::MAX);
                        (
                            at.saturating_add(RATE_TICK.saturating_mul(offset)),
                            Draw::Tick(tick),
                        )
                    })
                    .take_while(move |(offset, _)| end.is_none_or(|end| *offset < end)),
            )
        }
    }
}

/// What the replay does to a disruption at a wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Begin,
    End,
}

/// Every disruption's beginning and end (when it has one), in wall-clock time since the
/// replay's start at `speed`, in time order (a disruption's beginning before its end).
///
/// A spot interruption or a node-pool upgrade has no steps: each plays on its own ([`draws`]).
pub fn schedule(disruptions: &[Disruption], speed: f64) -> Vec<(Duration, usize, Step)> {
    let wall = |recorded: Duration| recorded.div_f64(speed);
    let mut steps: Vec<(Duration, usize, Step)> = disruptions
        .iter()
        .enumerate()
        .filter(|(_, disruption)| !matches!(disruption, Disruption::SpotInterruption(_)))
        .filter(|(_, disruption)| !matches!(disruption, Disruption::NodePoolUpgrade(_)))
        .flat_map(|(index, disruption)| {
            let at = disruption.at();
            let end = disruption
                .duration()
                .map(|lasts| (wall(at.saturating_add(lasts)), index, Step::End));
            std::iter::once((wall(at), index, Step::Begin)).chain(end)
        })
        .collect();
    steps.sort_by_key(|&(at, index, step)| (at, index, step == Step::End));
    steps
}

/// The nodes a disruption takes: `share` of `nodes` (oldest first), rounded up, at places the
/// seed and the disruption's index decide, so the same seed takes the same places. Returned in
/// the order given.
pub fn choose(seed: u64, index: usize, nodes: &[String], share: f64) -> Vec<String> {
    let wanted = (nodes.len() as f64 * share).ceil() as usize;
    let wanted = wanted.clamp(usize::from(!nodes.is_empty()), nodes.len());
    let mut places: Vec<usize> = (0..nodes.len()).collect();
    places.sort_by_key(|&place| mix(seed ^ mix(index as u64) ^ mix(place as u64 ^ 0xd1b5)));
    let mut taken: Vec<usize> = places.into_iter().take(wanted).collect();
    taken.sort_unstable();
    taken
        .into_iter()
        .map(|place| nodes[place].clone())
        .collect()
}

/// splitmix64's finaliser: spreads nearby inputs apart, the same on every platform and release.
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// m5 (pool of 3, us-east-1a), east (autoscaled, us-east-1a), west (autoscaled,
    /// us-east-1b), spot (a NodePool).
    fn groups() -> Vec<GroupFacts<'static>> {
        let group = |name, zone, kind| GroupFacts {
            name,
            zone,
            kind,
            size: (kind == GroupKind::Pool).then_some(3),
        };
        vec![
            group("m5", Some("us-east-1a"), GroupKind::Pool),
            group("east", Some("us-east-1a"), GroupKind::Autoscaled),
            group("west", Some("us-east-1b"), GroupKind::Autoscaled),
            group("spot", None, GroupKind::NodePool),
        ]
    }

    fn seconds(seconds: i64) -> prost_types::Duration {
        prost_types::Duration { seconds, nanos: 0 }
    }

    fn outage(zone: &str, at_s: i64, for_s: Option<i64>) -> pb::Disruption {
        pb::Disruption {
            kind: Some(pb::disruption::Kind::ZoneOutage(pb::ZoneOutage {
                zone: zone.to_owned(),
                at: Some(seconds(at_s)),
                duration: for_s.map(seconds),
            })),
        }
    }

    fn stockout(group: &str, at_s: i64, for_s: Option<i64>) -> pb::Disruption {
        pb::Disruption {
            kind: Some(pb::disruption::Kind::Stockout(pb::Stockout {
                node_group: group.to_owned(),
                at: Some(seconds(at_s)),
                duration: for_s.map(seconds),
                instance_type: String::new(),
            })),
        }
    }

    #[test]
    fn a_zone_outage_takes_the_zones_groups_and_a_stockout_an_autoscaled_group() {
        let checked = from_proto(
            &[
                outage("us-east-1a", 60, Some(600)),
                stockout("west", 0, None),
            ],
            &groups(),
        )
        .unwrap();
        assert_eq!(
            checked[0],
            Disruption::ZoneOutage(ZoneOutage {
                zone: "us-east-1a".to_owned(),
                groups: vec!["m5".to_owned(), "east".to_owned()],
                autoscaled: vec!["east".to_owned()],
                node_pools: vec!["spot".to_owned()],
                at: Duration::from_secs(60),
                duration: Some(Duration::from_secs(600)),
            })
        );
        // The NodePool's offerings in the zone are withdrawn for the outage.
        assert_eq!(
            checked[0].withdrawals(),
            [Withdrawal {
                node_pool: "spot".to_owned(),
                instance_type: String::new(),
                zone: "us-east-1a".to_owned(),
                reason: "zone us-east-1a outage".to_owned(),
            }]
        );
        assert_eq!(
            (checked[0].group(), checked[0].zone()),
            ("m5,east,spot".to_owned(), "us-east-1a")
        );
        assert_eq!(
            checked[1],
            Disruption::Stockout(Stockout {
                group: "west".to_owned(),
                node_pool: false,
                instance_type: None,
                at: Duration::ZERO,
                duration: None,
            })
        );
        assert!(
            checked[1].withdrawals().is_empty(),
            "CA's groups are the provider's"
        );
        let refused = |disruption: pb::Disruption| {
            from_proto(&[disruption], &groups())
                .unwrap_err()
                .to_string()
        };
        // Without a NodePool in the spec, a zone is one of its groups'.
        let message = from_proto(&[outage("eu-west-1a", 60, None)], &groups()[..3])
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "spec.disruptions[0].zone_outage.zone: \"eu-west-1a\" is the zone of none of the \
             spec's node groups (their skeletons' topology.kubernetes.io/zone: us-east-1a, \
             us-east-1b)"
        );
        let message = refused(outage("us-east-1b", 60, Some(-5)));
        assert!(
            message.starts_with("spec.disruptions[0].zone_outage.duration: must be positive"),
            "{message}"
        );
        let message = refused(stockout("m5", 60, None));
        assert!(
            message.starts_with(
                "spec.disruptions[0].stockout.node_group: \"m5\" is a fixed-size group"
            ),
            "{message}"
        );
        let message = refused(outage("not a zone", 60, None));
        assert!(
            message.contains("a NodePool's zone is a label value"),
            "{message}"
        );
        let message = refused(stockout("c5", 60, None));
        assert!(
            message.contains("(it has m5, east, west, spot)"),
            "{message}"
        );
    }

    #[test]
    fn a_nodepools_zone_outage_and_stockout_withdraw_its_offerings() {
        // Karpenter's instance types say which zones a NodePool has; the spec does not.
        let checked = from_proto(&[outage("eu-west-1a", 0, Some(60))], &groups()).unwrap();
        let Disruption::ZoneOutage(taken) = &checked[0] else {
            panic!("{checked:?}")
        };
        assert!(taken.groups.is_empty() && taken.autoscaled.is_empty());
        assert_eq!(taken.node_pools, ["spot"]);

        let mut of_type = stockout("spot", 30, Some(60));
        if let Some(pb::disruption::Kind::Stockout(out)) = &mut of_type.kind {
            out.instance_type = "m5.large".to_owned();
        }
        let checked = from_proto(&[stockout("spot", 0, None), of_type.clone()], &groups()).unwrap();
        let reasons: Vec<(String, String)> = checked
            .iter()
            .flat_map(Disruption::withdrawals)
            .map(|w| (w.instance_type, w.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                (String::new(), "stockout".to_owned()),
                ("m5.large".to_owned(), "stockout of m5.large".to_owned())
            ]
        );
        // An instance type is a NodePool's to lose: a CA group has one.
        if let Some(pb::disruption::Kind::Stockout(out)) = &mut of_type.kind {
            out.node_group = "west".to_owned();
        }
        let message = from_proto(&[of_type.clone()], &groups())
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("spec.disruptions[0].stockout.instance_type: a stockout of an"),
            "{message}"
        );
        if let Some(pb::disruption::Kind::Stockout(out)) = &mut of_type.kind {
            out.node_group = "spot".to_owned();
            out.instance_type = "m5 large".to_owned();
        }
        let message = from_proto(&[of_type], &groups()).unwrap_err().to_string();
        assert!(message.contains("\"m5 large\" cannot be"), "{message}");
    }

    fn failure(group: &str, share: f64, at_s: i64, for_s: Option<i64>) -> pb::Disruption {
        let seconds = |seconds| prost_types::Duration { seconds, nanos: 0 };
        pb::Disruption {
            kind: Some(pb::disruption::Kind::NodeFailure(pb::NodeFailure {
                node_group: group.to_owned(),
                share,
                at: Some(seconds(at_s)),
                duration: for_s.map(seconds),
                node: String::new(),
            })),
        }
    }

    #[test]
    fn a_failure_is_checked_and_share_zero_means_all() {
        let checked = from_proto(&[failure("m5", 0.0, 600, Some(300))], &groups()).unwrap();
        assert_eq!(
            checked,
            vec![Disruption::NodeFailure(NodeFailure {
                group: "m5".to_owned(),
                node: None,
                share: 1.0,
                at: Duration::from_secs(600),
                duration: Some(Duration::from_secs(300)),
            })]
        );
    }

    #[test]
    fn bad_input_names_the_field() {
        let refused = |disruption: pb::Disruption| {
            from_proto(&[failure("m5", 0.5, 0, None), disruption], &groups())
                .unwrap_err()
                .to_string()
        };
        let message = refused(failure("c5", 0.5, 10, None));
        assert!(
            message.starts_with("spec.disruptions[1].node_failure.node_group: \"c5\"")
                && message.contains("(it has m5, east, west, spot)"),
            "{message}"
        );
        for share in [1.5, -0.1, f64::NAN, f64::INFINITY] {
            let message = refused(failure("m5", share, 10, None));
            assert!(
                message.starts_with("spec.disruptions[1].node_failure.share: must be in (0, 1]"),
                "{message}"
            );
        }
        let message = refused(failure("m5", 0.5, -1, None));
        assert!(
            message.starts_with("spec.disruptions[1].node_failure.at: must be non-negative"),
            "{message}"
        );
        let message = refused(failure("m5", 0.5, 10, Some(0)));
        assert!(
            message.starts_with("spec.disruptions[1].node_failure.duration: must be positive"),
            "{message}"
        );
        let message = refused(failure("m5", 0.5, 10, Some(400 * 86_400)));
        assert!(message.contains("at most 365 days"), "{message}");
        let message = refused(pb::Disruption { kind: None });
        assert_eq!(
            message,
            "spec.disruptions[1]: set node_failure, zone_outage, stockout, spot_interruption or \
             node_pool_upgrade"
        );
    }

    #[test]
    fn the_schedule_is_in_wall_clock_time_and_in_order() {
        let checked = from_proto(
            &[
                failure("m5", 1.0, 600, Some(300)),
                failure("m5", 1.0, 100, None),
            ],
            &groups(),
        )
        .unwrap();
        assert_eq!(
            schedule(&checked, 10.0),
            vec![
                (Duration::from_secs(10), 1, Step::Begin),
                (Duration::from_secs(60), 0, Step::Begin),
                (Duration::from_secs(90), 0, Step::End),
            ]
        );
    }

    #[test]
    fn the_seed_decides_which_nodes_and_the_share_how_many() {
        let nodes: Vec<String> = (0..10).map(|n| format!("m5-{n}")).collect();
        let half = choose(7, 0, &nodes, 0.5);
        assert_eq!(half.len(), 5);
        assert_eq!(
            choose(7, 0, &nodes, 0.5),
            half,
            "the same seed, the same nodes"
        );
        let others: Vec<Vec<String>> = (0..8).map(|seed| choose(seed, 0, &nodes, 0.5)).collect();
        assert!(
            others.iter().any(|chosen| *chosen != half),
            "the seed changes the choice"
        );
        assert_ne!(
            choose(7, 1, &nodes, 0.5),
            half,
            "another disruption draws its own"
        );
        // Rounded up: a share of a node is a node.
        assert_eq!(choose(7, 0, &nodes, 0.01).len(), 1);
        assert_eq!(choose(7, 0, &nodes, 1.0), nodes);
        assert!(choose(7, 0, &[], 1.0).is_empty());
        // In the order given (oldest first).
        let mut sorted = half.clone();
        sorted.sort_by_key(|name| nodes.iter().position(|n| n == name));
        assert_eq!(half, sorted);
    }

    fn spot(times_s: &[i64], rate: f64, window_s: Option<(i64, i64)>) -> pb::Disruption {
        pb::Disruption {
            kind: Some(pb::disruption::Kind::SpotInterruption(
                pb::SpotInterruption {
                    node_group: "east".to_owned(),
                    times: times_s.iter().map(|s| seconds(*s)).collect(),
                    rate_per_hour: rate,
                    at: window_s.map(|(at, _)| seconds(at)),
                    duration: window_s.map(|(_, lasts)| seconds(lasts)),
                    notice: None,
                },
            )),
        }
    }

    #[test]
    fn a_spot_interruption_takes_times_or_a_rate_and_a_two_minute_notice() {
        let checked = from_proto(
            &[
                spot(&[600, 60], 0.0, None),
                spot(&[], 0.05, Some((0, 7200))),
            ],
            &groups(),
        )
        .unwrap();
        assert_eq!(
            checked[0],
            Disruption::SpotInterruption(SpotInterruption {
                group: "east".to_owned(),
                node_pool: false,
                when: Interruptions::Times(vec![Duration::from_secs(60), Duration::from_secs(600)]),
                notice: Duration::from_secs(120),
            })
        );
        assert_eq!(checked[0].at(), Duration::from_secs(60));
        assert!(schedule(&checked, 1.0).is_empty(), "spot plays on its own");
        let Disruption::SpotInterruption(rate) = &checked[1] else {
            panic!("{:?}", checked[1]);
        };
        let ticks: Vec<(Duration, Draw)> = draws(&rate.when).collect();
        assert_eq!(ticks.len(), 120, "a draw a minute for two hours");
        assert_eq!(ticks[1], (Duration::from_secs(60), Draw::Tick(1)));
        let Disruption::SpotInterruption(times) = &checked[0] else {
            panic!("{:?}", checked[0]);
        };
        assert_eq!(
            draws(&times.when).collect::<Vec<_>>(),
            vec![
                (Duration::from_secs(60), Draw::Time(0)),
                (Duration::from_secs(600), Draw::Time(1))
            ]
        );
        let endless = Interruptions::Rate {
            per_hour: 1.0,
            at: Duration::ZERO,
            duration: None,
        };
        assert_eq!(draws(&endless).take(1000).count(), 1000);

        let refused = |disruption: pb::Disruption| {
            from_proto(&[disruption], &groups())
                .unwrap_err()
                .to_string()
        };
        for (disruption, expected) in [
            (
                spot(&[60], 0.05, None),
                "spec.disruptions[0].spot_interruption.rate_per_hour: set times or rate_per_hour, \
                 not both",
            ),
            (
                spot(&[], 0.0, None),
                "spec.disruptions[0].spot_interruption.times: set times or rate_per_hour",
            ),
            (
                spot(&[], 11.0, None),
                "spec.disruptions[0].spot_interruption.rate_per_hour: must be in (0, 10] per \
                 node and hour, got 11",
            ),
            (
                spot(&[], -0.5, None),
                "spec.disruptions[0].spot_interruption.rate_per_hour: must be in (0, 10] per \
                 node and hour, got -0.5",
            ),
            (
                spot(&[60, -1], 0.0, None),
                "spec.disruptions[0].spot_interruption.times[1]: must be non-negative and at \
                 most 365 days",
            ),
            (
                spot(&[60], 0.0, Some((0, 60))),
                "spec.disruptions[0].spot_interruption.at: at and duration bound a rate: with \
                 times, leave them unset",
            ),
        ] {
            assert_eq!(refused(disruption), expected);
        }
        let mut long_notice = spot(&[60], 0.0, None);
        if let Some(pb::disruption::Kind::SpotInterruption(spot)) = &mut long_notice.kind {
            spot.notice = Some(seconds(3601));
        }
        assert_eq!(
            refused(long_notice),
            "spec.disruptions[0].spot_interruption.notice: must be positive and at most an hour"
        );
        let mut of_pool = spot(&[60], 0.0, None);
        if let Some(pb::disruption::Kind::SpotInterruption(spot)) = &mut of_pool.kind {
            "m5".clone_into(&mut spot.node_group);
        }
        assert!(refused(of_pool).starts_with(
            "spec.disruptions[0].spot_interruption.node_group: \"m5\" is a fixed-size group"
        ));
        // A NodePool's spot nodes are interrupted.
        let mut of_node_pool = spot(&[60], 0.0, None);
        if let Some(pb::disruption::Kind::SpotInterruption(spot)) = &mut of_node_pool.kind {
            "spot".clone_into(&mut spot.node_group);
        }
        let checked = from_proto(&[of_node_pool], &groups()).unwrap();
        assert!(
            matches!(&checked[0], Disruption::SpotInterruption(s) if s.node_pool),
            "{checked:?}"
        );
    }

    #[test]
    fn the_seed_decides_which_nodes_are_interrupted_and_the_rate_how_often() {
        let nodes: Vec<String> = (0..10_000).map(|n| format!("east-{n}")).collect();
        let probability = tick_probability(6.0);
        assert!((probability - (1.0 - (-0.1_f64).exp())).abs() < 1e-12);
        let first = drawn(7, 0, 3, &nodes, probability);
        assert_eq!(drawn(7, 0, 3, &nodes, probability), first, "the same seed");
        assert_ne!(drawn(8, 0, 3, &nodes, probability), first, "another seed");
        assert_ne!(drawn(7, 0, 4, &nodes, probability), first, "another tick");
        // About 952 of 10,000 at 9.5%; the draw is the seed's, so this is exact for seed 7.
        assert!((850..1050).contains(&first.len()), "{}", first.len());
        assert!(drawn(7, 0, 3, &nodes, 0.0).is_empty());

        let few = &nodes[..5];
        let picked_once = picked(7, 0, 0, few).unwrap();
        assert_eq!(picked(7, 0, 0, few).as_ref(), Some(&picked_once));
        let all: std::collections::BTreeSet<String> = (0..50)
            .filter_map(|event| picked(7, 0, event, few))
            .collect();
        assert_eq!(all.len(), 5, "every node can be picked");
        assert_eq!(picked(7, 0, 0, &[]), None);
    }

    fn upgrade(surge: Option<u32>, unavailable: Option<u32>) -> pb::Disruption {
        pb::Disruption {
            kind: Some(pb::disruption::Kind::NodePoolUpgrade(pb::NodePoolUpgrade {
                node_group: "east".to_owned(),
                at: Some(seconds(60)),
                max_surge: surge,
                max_unavailable: unavailable,
                drain_timeout: None,
            })),
        }
    }

    #[test]
    fn an_upgrade_surges_one_by_default_and_one_per_group() {
        let checked = from_proto(&[upgrade(None, None)], &groups()).unwrap();
        assert_eq!(
            checked,
            vec![Disruption::NodePoolUpgrade(NodePoolUpgrade {
                group: "east".to_owned(),
                at: Duration::from_secs(60),
                max_surge: 1,
                max_unavailable: 0,
                drain_timeout: Duration::from_secs(3600),
            })]
        );
        assert!(schedule(&checked, 1.0).is_empty(), "it plays on its own");
        let refused =
            |given: &[pb::Disruption]| from_proto(given, &groups()).unwrap_err().to_string();
        assert_eq!(
            refused(&[upgrade(Some(0), Some(0))]),
            "spec.disruptions[0].node_pool_upgrade.max_unavailable: max_surge and \
             max_unavailable are both 0: no node could ever be replaced"
        );
        assert_eq!(
            refused(&[
                upgrade(None, None),
                failure("m5", 1.0, 0, None),
                upgrade(Some(2), None)
            ]),
            "spec.disruptions[2].node_pool_upgrade.node_group: \"east\" is upgraded by \
             spec.disruptions[0] already: upgrades of one group would overlap (how long one \
             takes is not known before it runs)"
        );
        let mut no_time = upgrade(None, None);
        if let Some(pb::disruption::Kind::NodePoolUpgrade(up)) = &mut no_time.kind {
            up.drain_timeout = Some(seconds(0));
        }
        assert_eq!(
            refused(&[no_time]),
            "spec.disruptions[0].node_pool_upgrade.drain_timeout: must be positive and at most a day"
        );
    }

    #[test]
    fn an_upgrade_retires_its_surge_last_and_keeps_the_ready_nodes_it_promised() {
        // Four nodes, surge 1: three replaced, the last retired.
        let plan: Vec<bool> = (0..4).map(|removed| retires(removed, 4, 1)).collect();
        assert_eq!(plan, [false, false, false, true]);
        // Surge 0: every node replaced.
        assert!((0..4).all(|removed| !retires(removed, 4, 0)));
        // Surge 1, unavailable 0, a batch of one: five Ready before one of four goes.
        assert_eq!(ready_needed(4, 1, 0), 5);
        // Surge 0, unavailable 1: four Ready before one goes, three while it does.
        assert_eq!(ready_needed(4, 1, 1), 4);
        assert_eq!(ready_needed(4, 3, 1), 6);
    }

    fn named(node: &str, group: &str) -> pb::Disruption {
        pb::Disruption {
            kind: Some(pb::disruption::Kind::NodeFailure(pb::NodeFailure {
                node: node.to_owned(),
                node_group: group.to_owned(),
                at: Some(seconds(60)),
                ..pb::NodeFailure::default()
            })),
        }
    }

    #[test]
    fn a_named_node_is_one_of_a_fixed_size_groups() {
        let checked = from_proto(&[named("m5-2", "")], &groups()).unwrap();
        let Disruption::NodeFailure(failure) = &checked[0] else {
            panic!("{checked:?}");
        };
        assert_eq!(
            (failure.group.as_str(), failure.node.as_deref()),
            ("m5", Some("m5-2"))
        );
        let refused = |disruption| {
            from_proto(&[disruption], &groups())
                .unwrap_err()
                .to_string()
        };
        for node in ["m5-3", "m5-02", "east-0", "c5-0"] {
            assert_eq!(
                refused(named(node, "")),
                format!(
                    "spec.disruptions[0].node_failure.node: {node:?} is none of the run's named \
                     nodes (m5-0..m5-2; the nodes of autoscaler groups and NodePools are named \
                     when they come)"
                )
            );
        }
        assert_eq!(
            refused(named("m5-0", "m5")),
            "spec.disruptions[0].node_failure.node: a node by name, or node_group and share: not \
             both"
        );
    }
}
