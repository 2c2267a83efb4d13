//! The rules: stable ids, names, titles, severities and the explanations `ksim trace explain`
//! prints.

use std::fmt;

/// How bad a finding is. `ksim trace validate` exits non-zero when a finding of
/// [`Severity::Error`] remains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The replay will not do what the recording did, or the trace cannot be read as it is.
    Error,
    /// The replay copes, but the trace is not what a replay expects.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Error => "error",
            Self::Warning => "warning",
        })
    }
}

/// One rule. Ids never change meaning and are never reused.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// `KS001`, ...
    pub id: &'static str,
    /// `missing-reference`, ...
    pub name: &'static str,
    pub title: &'static str,
    pub severity: Severity,
    /// Why it matters for a replay, and what `--fix` does.
    pub explanation: &'static str,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.id, self.name)
    }
}

pub static MISSING_REFERENCE: Rule = Rule {
    id: "KS001",
    name: "missing-reference",
    title: "a pod template references a ServiceAccount, ConfigMap, Secret or PersistentVolumeClaim absent from the trace",
    severity: Severity::Error,
    explanation: "\
Pod templates (a Pod itself, or the template of a Deployment, Job, CronJob, ...) may name a
ServiceAccount (serviceAccountName), ConfigMaps and Secrets (volumes, projected volumes, envFrom,
env valueFrom) and PersistentVolumeClaims (volumes). A replay creates only the objects in the
trace, in a fresh namespace, so a name that no object of the trace carries does not exist there:
the ServiceAccount admission plugin refuses pods naming a missing ServiceAccount, the scheduler
leaves pods with a missing claim Pending, and a real kubelet never starts a pod whose ConfigMap or
Secret is missing. Optional references (optional: true), the namespace's `default` ServiceAccount
and the `kube-root-ca.crt` ConfigMap, which every namespace has, are not reported.

--fix removes the references from the pod templates rather than inventing placeholder objects
(a placeholder claim would itself stay unbound, so removal is what makes the trace replay):
serviceAccountName falls back to the namespace's default ServiceAccount; a volume naming a
missing object is removed together with the volumeMounts that mount it; a projected source, an
envFrom entry or an env variable naming one is removed.",
};

pub static ABSENT_OWNER: Rule = Rule {
    id: "KS002",
    name: "absent-owner",
    title: "an owner reference names an object absent from the trace",
    severity: Severity::Warning,
    explanation: "\
An object's metadata.ownerReferences name the controller that created it. When that owner is not
in the trace, nothing at replay stands for it: the object is replayed as recorded but no
controller recreates or scales it, and a tool that keeps owner references would have the garbage
collector delete the object at once, since its owner's uid does not exist. (ksim's driver replaces
owner references by the simulation's root, so for ksim this is a warning.) Owners are matched by
group, kind, namespace and name among the objects the trace applies.

--fix removes the owner references to absent owners, keeping the others.",
};

pub static SERVER_FIELDS: Rule = Rule {
    id: "KS003",
    name: "server-fields",
    title: "an object carries status or fields the API server sets",
    severity: Severity::Warning,
    explanation: "\
A trace should hold objects as a user would create them. status and the metadata the API server
fills in (uid, resourceVersion, creationTimestamp, generation, managedFields, selfLink,
deletionTimestamp, deletionGracePeriodSeconds) describe the recorded cluster, not the object: an
API server refuses a create that sets resourceVersion, and status would be ignored or, through
server-side apply, fight the simulated controllers. ksim's driver strips them before applying, so
for ksim this is a warning; SimKube traces keep status by design.

--fix removes status and those metadata fields.",
};

pub static UNKNOWN_KIND: Rule = Rule {
    id: "KS004",
    name: "unknown-kind",
    title: "the target cluster does not serve a kind of the trace",
    severity: Severity::Error,
    explanation: "\
Checked only when a cluster is given (--kubeconfig/--context): its discovery API lists the
group/version/kinds it serves. An object of any other kind (a CRD that is not installed, an API
version the cluster no longer serves) is refused at replay, and objects that depend on it are
missing from the simulation.

--fix removes the objects of those kinds from every event, and the pod lifecycles they own
(install the CRD instead to keep them).",
};

pub static OUT_OF_ORDER: Rule = Rule {
    id: "KS005",
    name: "out-of-order",
    title: "events are out of timestamp order or outside the header's time window",
    severity: Severity::Error,
    explanation: "\
A replay applies events at their recorded offsets, in file order. An event older than the event
before it cannot be applied on time (ksim's reader refuses such a file as corrupt), and an event
outside the header's [start, end) window has an offset the replay does not expect.

--fix sorts the events by timestamp, stable (events of equal time keep their order), and widens
the header's window to cover every event. Sorting keeps the events in memory, so a file with
events out of order is fixed in memory; every other fix streams.",
};

pub static INVALID_VALUE: Rule = Rule {
    id: "KS006",
    name: "invalid-value",
    title: "an object carries replicas beyond an int32 or a namespace name that is not a DNS label",
    severity: Severity::Error,
    explanation: "\
The API server refuses an object with a value its schema does not allow, so the replay cannot
create it, and whatever depends on it is missing from the simulation. Checked: spec.replicas (of
a Deployment, StatefulSet, ReplicaSet, ...) must be an integer from 0 to 2147483647, an int32; a
namespace's name (an object's namespace, a Namespace's own name) must be an RFC 1123 DNS label:
at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit. Each
invalid namespace is reported once, where it is first seen. A transform that scales replicas or
renames namespaces checks the same (`ksim trace transform`).

--fix sets replicas outside the range to the nearest value inside it (a fraction is rounded).
It does not rename namespaces, since a new name is a choice: give one with `ksim trace
transform` and a renameNamespace rule.",
};

pub static BAD_USAGE: Rule = Rule {
    id: "KS007",
    name: "bad-usage",
    title: "a usage sample is out of order for its pod, outside the header's window, or beyond any machine",
    severity: Severity::Error,
    explanation: "\
Usage samples say what a pod's containers used (CPU, the memory working set) over a window
ending at the sample's time; a replay has each replayed pod use what its recorded pod used at
the same offset. A sample at or before the previous sample of the same pod (namespace and name)
contradicts it: the pod would use two amounts at once, or go back in time. A sample outside the
header's [start, end) window has no offset in the replay. A container using more than any
machine holds (over 4,096 cores or 64 TiB of memory) or a window over an hour is not a
measurement. Negative amounts and windows are refused when the trace is read.

--fix removes those samples; the pod's other samples are kept.",
};

/// Every rule, in id order.
pub static RULES: [&Rule; 7] = [
    &MISSING_REFERENCE,
    &ABSENT_OWNER,
    &SERVER_FIELDS,
    &UNKNOWN_KIND,
    &OUT_OF_ORDER,
    &INVALID_VALUE,
    &BAD_USAGE,
];

/// The rule with id (`KS001`) or name (`missing-reference`) `key`, case-insensitive.
pub fn find_rule(key: &str) -> Option<&'static Rule> {
    let key = key.trim();
    RULES
        .iter()
        .copied()
        .find(|rule| rule.id.eq_ignore_ascii_case(key) || rule.name.eq_ignore_ascii_case(key))
}

#[cfg(test)]
mod tests {
    use super::{RULES, find_rule};

    #[test]
    fn ids_and_names_are_unique_and_found_either_way() {
        for (index, rule) in RULES.iter().enumerate() {
            assert_eq!(rule.id, format!("KS{:03}", index + 1));
            assert_eq!(find_rule(rule.id), Some(*rule));
            assert_eq!(find_rule(&rule.name.to_uppercase()), Some(*rule));
            assert!(!rule.explanation.is_empty());
            assert!(rule.explanation.contains("--fix"), "{}", rule.id);
        }
        assert_eq!(find_rule("ks001"), find_rule("missing-reference"));
        assert!(find_rule("KS999").is_none());
        assert!(find_rule("").is_none());
    }
}
