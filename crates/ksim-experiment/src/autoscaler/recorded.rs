//! The recorded cluster's cluster-autoscaler flags: read from its Deployment in a trace, or from
//! a file of them, then sorted into those a replay applies (the flags a run may set, see
//! [`super::policy`]) and those it does not, each with why.

use serde_json::Value;

use super::{AutoscalerFlag, AutoscalerFlags};

/// The program name CA runs as, in a container's command or image.
const PROGRAM: &str = "cluster-autoscaler";

/// A line of a flags file that is not `FLAG=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {text:?} is not FLAG=VALUE (e.g. scale-down-unneeded-time=10m)")]
pub struct FileError {
    pub line: usize,
    pub text: String,
}

/// A recorded flag the replay does not apply, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApplied {
    /// As recorded, `--name=value`.
    pub flag: String,
    pub reason: String,
}

/// The flags of a recorded CA as `name=value`, if `object_json` is a Deployment one of whose
/// containers runs cluster-autoscaler (its command, or its image when the command is the
/// image's own); `None` otherwise. Flags come from the command after the program, then the
/// args, as the container runs them; `--flag value` pairs and bare `--flag` (a boolean, true)
/// are written as `flag=value`.
pub fn flags_in_deployment(object_json: &[u8]) -> Option<Vec<String>> {
    let object: Value = serde_json::from_slice(object_json).ok()?;
    if object.get("kind")?.as_str()? != "Deployment" {
        return None;
    }
    let containers = object
        .pointer("/spec/template/spec/containers")?
        .as_array()?;
    containers.iter().find_map(container_flags)
}

fn container_flags(container: &Value) -> Option<Vec<String>> {
    let strings = |key: &str| -> Vec<String> {
        container
            .get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let command = strings("command");
    let args = strings("args");
    let runs_ca = |word: &str| {
        word.rsplit('/')
            .next()
            .is_some_and(|program| program == PROGRAM)
    };
    let words: Vec<String> = match command.iter().position(|word| runs_ca(word)) {
        Some(at) => command[at + 1..].iter().chain(&args).cloned().collect(),
        None if command.is_empty() => {
            let image = container.get("image").and_then(Value::as_str)?;
            let name = image.rsplit('/').next()?;
            let name = name.split([':', '@']).next()?;
            if name != PROGRAM {
                return None;
            }
            args
        }
        None => return None,
    };
    Some(normalise(&words))
}

/// `--a=1 --b 2 --c -v=4` as `a=1`, `b=2`, `c=true`, `v=4`; words that are no flag (a
/// positional argument, which CA does not take) are dropped.
fn normalise(words: &[String]) -> Vec<String> {
    let mut flags = Vec::new();
    let mut words = words.iter().peekable();
    while let Some(word) = words.next() {
        let Some(bare) = word
            .strip_prefix("--")
            .or_else(|| word.strip_prefix('-'))
            .filter(|bare| !bare.is_empty())
        else {
            continue;
        };
        if bare.contains('=') {
            flags.push(bare.to_owned());
            continue;
        }
        match words.peek() {
            Some(value) if !value.starts_with('-') => {
                flags.push(format!("{bare}={value}"));
                words.next();
            }
            _ => flags.push(format!("{bare}=true")),
        }
    }
    flags
}

/// A flags file: one `FLAG=VALUE` per line (with or without `--`), blank lines and `#`
/// comments ignored. Which flags apply is [`sort`]'s to say.
pub fn parse_file(text: &str) -> Result<Vec<String>, FileError> {
    let mut flags = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bare = line.strip_prefix("--").unwrap_or(line);
        match bare.split_once('=') {
            Some((name, _)) if !name.is_empty() && !name.contains(char::is_whitespace) => {
                flags.push(bare.to_owned());
            }
            _ => {
                return Err(FileError {
                    line: index + 1,
                    text: line.to_owned(),
                });
            }
        }
    }
    Ok(flags)
}

/// The recorded flags a replay applies (each a flag a run may set, with a value it takes), and
/// the others with why: where production CA logs, whom it connects to, its provider's node
/// groups and the like are the environment's.
pub fn sort<S: AsRef<str>>(recorded: &[S]) -> (AutoscalerFlags, Vec<NotApplied>) {
    let mut applied = Vec::new();
    let mut not_applied = Vec::new();
    for text in recorded {
        let text = text.as_ref();
        match text.parse::<AutoscalerFlag>() {
            Ok(flag) => applied.push(flag),
            Err(error) => not_applied.push(NotApplied {
                flag: format!("--{}", text.strip_prefix("--").unwrap_or(text)),
                reason: error.to_string(),
            }),
        }
    }
    (AutoscalerFlags { flags: applied }, not_applied)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn deployment(container: Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "image": "busybox", "command": ["sleep", "inf"]},
                container,
            ]}}}
        }))
        .unwrap()
    }

    #[test]
    fn the_flags_of_a_ca_deployments_command_are_read() {
        let json = deployment(serde_json::json!({
            "name": "cluster-autoscaler",
            "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2",
            "command": ["./cluster-autoscaler", "--v=4", "--cloud-provider=aws",
                        "--scale-down-unneeded-time=3m", "--expander", "least-waste",
                        "--balance-similar-node-groups", "--skip-nodes-with-local-storage=false"],
            "args": ["--nodes=1:10:asg-a"],
        }));
        assert_eq!(
            flags_in_deployment(&json).unwrap(),
            [
                "v=4",
                "cloud-provider=aws",
                "scale-down-unneeded-time=3m",
                "expander=least-waste",
                "balance-similar-node-groups=true",
                "skip-nodes-with-local-storage=false",
                "nodes=1:10:asg-a",
            ]
        );
    }

    #[test]
    fn an_image_that_runs_ca_with_args_only_is_read_and_other_objects_are_not() {
        let json = deployment(serde_json::json!({
            "name": "ca",
            "image": "registry.k8s.io/autoscaling/cluster-autoscaler@sha256:abc",
            "args": ["--scan-interval=30s"],
        }));
        assert_eq!(flags_in_deployment(&json).unwrap(), ["scan-interval=30s"]);
        let other = deployment(serde_json::json!({
            "name": "web", "image": "nginx", "args": ["--scan-interval=30s"],
        }));
        assert_eq!(flags_in_deployment(&other), None);
        // A wrapper command that is not CA: not CA's flags.
        let wrapped = deployment(serde_json::json!({
            "name": "ca",
            "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2",
            "command": ["/bin/sh", "-c"], "args": ["exec ca"],
        }));
        assert_eq!(flags_in_deployment(&wrapped), None);
        let mut service: Value = serde_json::from_slice(&json).unwrap();
        service["kind"] = "StatefulSet".into();
        assert_eq!(
            flags_in_deployment(&serde_json::to_vec(&service).unwrap()),
            None
        );
        assert_eq!(flags_in_deployment(b"not json"), None);
    }

    #[test]
    fn recorded_flags_a_run_may_set_apply_and_the_others_say_why_not() {
        let (applied, not_applied) = sort(&[
            "scale-down-unneeded-time=3m",
            "cloud-provider=aws",
            "nodes=1:10:asg-a",
            "skip-nodes-with-system-pods=false",
            "scale-down-delay-after-add=soon",
            "leader-elect=true",
        ]);
        let applied: Vec<String> = applied.flags.iter().map(ToString::to_string).collect();
        assert_eq!(
            applied,
            [
                "--scale-down-unneeded-time=3m",
                "--skip-nodes-with-system-pods=false"
            ]
        );
        let names: Vec<&str> = not_applied.iter().map(|n| n.flag.as_str()).collect();
        assert_eq!(
            names,
            [
                "--cloud-provider=aws",
                "--nodes=1:10:asg-a",
                "--scale-down-delay-after-add=soon",
                "--leader-elect=true"
            ]
        );
        assert!(
            not_applied[1].reason.contains("(provider)"),
            "{:?}",
            not_applied[1]
        );
        assert!(
            not_applied[2].reason.contains("is not a duration"),
            "{:?}",
            not_applied[2]
        );
    }

    #[test]
    fn a_flags_file_is_flag_equals_value_per_line_with_comments() {
        let text =
            "# production CA, 2026-11\n--scale-down-unneeded-time=3m\n\n  expander=price  \n";
        assert_eq!(
            parse_file(text).unwrap(),
            ["scale-down-unneeded-time=3m", "expander=price"]
        );
        let error = parse_file("expander=price\n--expander least-waste\n").unwrap_err();
        assert_eq!(error.line, 2);
        assert_eq!(
            error.to_string(),
            "line 2: \"--expander least-waste\" is not FLAG=VALUE (e.g. \
             scale-down-unneeded-time=10m)"
        );
        assert!(parse_file("=3m").is_err());
    }
}
