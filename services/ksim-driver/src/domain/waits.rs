//! Why pods waited, from the events the scheduler, cluster-autoscaler and Karpenter give a pod:
//! the reasons without their node counts, so that the same constraint counts as one reason.

/// The events read: the scheduler's, CA's two about scale-ups, and Karpenter's nomination (its
/// FailedScheduling is told from the scheduler's by its message).
pub const FAILED_SCHEDULING: &str = "FailedScheduling";
pub const TRIGGERED_SCALE_UP: &str = "TriggeredScaleUp";
pub const NOT_TRIGGER_SCALE_UP: &str = "NotTriggerScaleUp";
pub const NOMINATED: &str = "Nominated";

/// How Karpenter's FailedScheduling begins (v1.14: `Failed to schedule pod, <why>`).
const KARPENTER_FAILED: &str = "Failed to schedule pod, ";

/// Whether the event says a node is on its way for the pod: the wait from then until the pod
/// is bound is for a node to boot.
pub fn asks_for_a_node(reason: &str) -> bool {
    reason == TRIGGERED_SCALE_UP || reason == NOMINATED
}

/// Where a reason came from, and the reasons an event of `reason` with `message` gives; empty
/// for an event that says nothing of waiting.
pub fn reasons(reason: &str, message: &str) -> (&'static str, Vec<String>) {
    match reason {
        FAILED_SCHEDULING if message.starts_with(KARPENTER_FAILED) => (
            "karpenter",
            vec![karpenter_reason(&message[KARPENTER_FAILED.len()..])],
        ),
        // Karpenter launched (or found) a node for the pod.
        NOMINATED if message.starts_with("Pod should schedule on") => {
            ("karpenter", vec![NOMINATED.to_owned()])
        }
        FAILED_SCHEDULING => ("scheduler", scheduler_reasons(message)),
        TRIGGERED_SCALE_UP => ("autoscaler", vec![TRIGGERED_SCALE_UP.to_owned()]),
        NOT_TRIGGER_SCALE_UP => ("autoscaler", autoscaler_reasons(message)),
        _ => ("", Vec::new()),
    }
}

/// `0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {a: b}. no
/// new claims to deallocate, preemption: ...` gives `Insufficient cpu` and `node(s) had
/// untolerated taint {a: b}`: the list ends with its sentence (what follows is about dynamic
/// resources and preemption). A message of another shape is its own reason.
fn scheduler_reasons(message: &str) -> Vec<String> {
    let Some((_, listed)) = message.split_once("nodes are available: ") else {
        return vec![whole(message)];
    };
    let listed = listed.split(". ").next().unwrap_or(listed);
    list(listed)
}

/// `pod didn't trigger scale-up: 1 max node group size reached` or `pod didn't trigger
/// scale-up (it wouldn't fit if a new node is added): 2 Insufficient cpu, 1 ...`.
fn autoscaler_reasons(message: &str) -> Vec<String> {
    match message
        .split_once("): ")
        .or_else(|| message.split_once(": "))
    {
        Some((_, listed)) => list(listed),
        None => vec![whole(message)],
    }
}

/// Comma-separated `<count> <reason>` items, counts dropped; braces (taints, selectors) may
/// hold commas of their own.
fn list(listed: &str) -> Vec<String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0_i32, 0);
    for (index, c) in listed.char_indices() {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&listed[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    items.push(&listed[start..]);
    items
        .into_iter()
        .map(|item| {
            let item = item.trim();
            let uncounted = match item.split_once(' ') {
                Some((count, rest)) if count.chars().all(|c| c.is_ascii_digit()) => rest,
                _ => item,
            };
            whole(uncounted)
        })
        .filter(|item| !item.is_empty())
        .collect()
}

/// Why Karpenter disrupted a node, or kept one or a NodePool's, from its event on the Node or
/// NodePool: (`disrupted`, `Empty`) of `DisruptionTerminating` `Disrupting Node: Empty`;
/// (`kept`, why) of `Unconsolidatable` and `DisruptionBlocked`, without the pod or budget they
/// name (`Pod has "karpenter.sh/do-not-disrupt" annotation`). `None`: another event.
pub fn disruption(reason: &str, message: &str) -> Option<(&'static str, String)> {
    match reason {
        "DisruptionTerminating" => {
            let why = message.strip_prefix("Disrupting Node: ")?;
            Some(("disrupted", whole(why)))
        }
        "Unconsolidatable" | "DisruptionBlocked" => {
            // `... (Pod=ns/name)`, `... (PodDisruptionBudget=[ns/name])`: the one it names.
            let why = match message.rfind(" (") {
                Some(at) if message.ends_with(')') && message[at..].contains('=') => &message[..at],
                _ => message,
            };
            Some(("kept", whole(why)))
        }
        _ => None,
    }
}

/// Karpenter's reason without what is particular to the pod: its first clause,
/// `incompatible with nodepool "general"` of `incompatible with nodepool "general", daemonset
/// overhead={...}, no instance type satisfied resources {...}`.
fn karpenter_reason(why: &str) -> String {
    let mut depth = 0_i32;
    for (index, c) in why.char_indices() {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth -= 1,
            ',' if depth == 0 => return whole(&why[..index]),
            _ => {}
        }
    }
    whole(why)
}

fn whole(text: &str) -> String {
    text.trim().trim_end_matches('.').trim().to_owned()
}

/// The owner a reason is counted for: a Deployment's pods (through the ReplicaSet named
/// `<deployment>-<pod-template-hash>`) as the Deployment, other controllers as themselves, a
/// bare pod as itself.
pub fn owner(
    controller: Option<(&str, &str)>,
    pod_template_hash: Option<&str>,
    pod_name: &str,
) -> String {
    match controller {
        Some(("ReplicaSet", name)) => {
            match pod_template_hash.and_then(|hash| name.strip_suffix(hash)?.strip_suffix('-')) {
                Some(deployment) => format!("Deployment/{deployment}"),
                None => format!("ReplicaSet/{name}"),
            }
        }
        Some((kind, name)) => format!("{kind}/{name}"),
        None => format!("Pod/{pod_name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedulers_reasons_lose_their_counts_and_the_preemption_part() {
        // As kube-scheduler 1.35 words it.
        let (source, found) = reasons(
            FAILED_SCHEDULING,
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint \
             {node.kubernetes.io/unreachable: , other: x}. no new claims to deallocate, \
             preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
        );
        assert_eq!(source, "scheduler");
        assert_eq!(
            found,
            [
                "Insufficient cpu",
                "node(s) had untolerated taint {node.kubernetes.io/unreachable: , other: x}"
            ]
        );
        let (_, other) = reasons(FAILED_SCHEDULING, "no nodes available to schedule pods.");
        assert_eq!(other, ["no nodes available to schedule pods"]);
        // Older schedulers end the list with a plain sentence.
        let (_, older) = reasons(
            FAILED_SCHEDULING,
            "0/2 nodes are available: 2 Insufficient memory. preemption: 0/2 nodes are available.",
        );
        assert_eq!(older, ["Insufficient memory"]);
    }

    #[test]
    fn karpenters_events_are_its_own_reasons_without_what_is_the_pods() {
        // As Karpenter v1.14 words them.
        let (source, found) = reasons(
            FAILED_SCHEDULING,
            "Failed to schedule pod, incompatible with nodepool \"general\", daemonset \
             overhead={\"cpu\":\"0\",\"pods\":\"0\"}, no instance type satisfied resources \
             {\"cpu\":\"64\",\"pods\":\"1\"} and requirements karpenter.sh/nodepool In [general]",
        );
        assert_eq!(source, "karpenter");
        assert_eq!(found, ["incompatible with nodepool \"general\""]);
        let (_, limits) = reasons(
            FAILED_SCHEDULING,
            "Failed to schedule pod, all available instance types exceed limits for nodepool: \"general\"",
        );
        assert_eq!(
            limits,
            ["all available instance types exceed limits for nodepool: \"general\""]
        );
        let (source, nominated) = reasons(
            NOMINATED,
            "Pod should schedule on: nodeclaim/general-abc12, node/kwok-general-abc12-x",
        );
        assert_eq!(
            (source, nominated),
            ("karpenter", vec!["Nominated".to_owned()])
        );
        assert!(asks_for_a_node(NOMINATED) && asks_for_a_node(TRIGGERED_SCALE_UP));
        assert!(!asks_for_a_node(FAILED_SCHEDULING));
        // The scheduler's own FailedScheduling stays the scheduler's.
        assert_eq!(
            reasons(
                FAILED_SCHEDULING,
                "0/1 nodes are available: 1 Insufficient cpu."
            )
            .0,
            "scheduler"
        );
        // Another component's Nominated says nothing of Karpenter.
        assert!(reasons(NOMINATED, "something else").1.is_empty());
    }

    #[test]
    fn karpenters_disruptions_and_what_kept_nodes_lose_the_pod_they_name() {
        assert_eq!(
            disruption("DisruptionTerminating", "Disrupting Node: Underutilized"),
            Some(("disrupted", "Underutilized".to_owned()))
        );
        // The NodeClaim's twin of the Node's event is not counted twice.
        assert_eq!(
            disruption("DisruptionTerminating", "Disrupting NodeClaim: Empty"),
            None
        );
        assert_eq!(
            disruption(
                "DisruptionBlocked",
                "Pod has \"karpenter.sh/do-not-disrupt\" annotation (Pod=shop/web-1)"
            ),
            Some((
                "kept",
                "Pod has \"karpenter.sh/do-not-disrupt\" annotation".to_owned()
            ))
        );
        assert_eq!(
            disruption(
                "DisruptionBlocked",
                "Pdb prevents pod evictions (PodDisruptionBudget=[shop/web])"
            ),
            Some(("kept", "Pdb prevents pod evictions".to_owned()))
        );
        assert_eq!(
            disruption("Unconsolidatable", "Can't replace with a cheaper node"),
            Some(("kept", "Can't replace with a cheaper node".to_owned()))
        );
        assert_eq!(
            disruption(
                "DisruptionBlocked",
                "No allowed disruptions for disruption reason Empty due to blocking budget"
            ),
            Some((
                "kept",
                "No allowed disruptions for disruption reason Empty due to blocking budget"
                    .to_owned()
            ))
        );
        assert_eq!(
            disruption("Nominated", "Pod should schedule on: node/a"),
            None
        );
    }

    #[test]
    fn autoscaler_events_say_whether_and_why_not() {
        assert_eq!(
            reasons(
                TRIGGERED_SCALE_UP,
                "pod triggered scale-up: [{m5 1->3 (max: 4)}]"
            ),
            ("autoscaler", vec!["TriggeredScaleUp".to_owned()])
        );
        assert_eq!(
            reasons(
                NOT_TRIGGER_SCALE_UP,
                "pod didn't trigger scale-up (it wouldn't fit if a new node is added): \
                 2 Insufficient memory, 1 max node group size reached"
            )
            .1,
            ["Insufficient memory", "max node group size reached"]
        );
        assert_eq!(
            reasons(
                NOT_TRIGGER_SCALE_UP,
                "pod didn't trigger scale-up: 1 max node group size reached"
            )
            .1,
            ["max node group size reached"]
        );
        assert!(reasons("Scheduled", "Successfully assigned").1.is_empty());
    }

    #[test]
    fn a_deployments_pods_count_for_the_deployment() {
        assert_eq!(
            owner(
                Some(("ReplicaSet", "web-5d9c7b")),
                Some("5d9c7b"),
                "web-5d9c7b-x"
            ),
            "Deployment/web"
        );
        assert_eq!(
            owner(Some(("ReplicaSet", "standalone")), Some("abc"), "p"),
            "ReplicaSet/standalone"
        );
        assert_eq!(owner(Some(("Job", "batch")), None, "p"), "Job/batch");
        assert_eq!(owner(None, None, "lonely"), "Pod/lonely");
    }
}
