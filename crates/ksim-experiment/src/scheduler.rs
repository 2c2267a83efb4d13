//! A `KubeSchedulerConfiguration` as the configuration under test.
//!
//! The user's file says how to schedule; the environment says where the scheduler connects. With
//! `--config`, kube-scheduler ignores its `--kubeconfig` flag, so the file the environment runs
//! is the user's with `clientConnection.kubeconfig` pointing at the simulated cluster and leader
//! election off (one scheduler, restarted at will). Everything else is the user's, judged by
//! the real kube-scheduler.

use std::path::Path;

use serde_json::{Map, Value};

const API_GROUP: &str = "kubescheduler.config.k8s.io/";
const KIND: &str = "KubeSchedulerConfiguration";

/// A scheduler configuration that cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerConfigError {
    #[error("scheduler configuration {file}: not YAML: {error}")]
    NotYaml { file: String, error: String },
    #[error("scheduler configuration {file}: {message}")]
    NotConfiguration { file: String, message: String },
}

/// How fast the scheduler's client may talk to the apiserver. With `--config`, kube-scheduler
/// ignores its `--kube-api-qps` and `--kube-api-burst` flags, so the environment's rate has to
/// go into the configuration itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientRate {
    pub qps: f32,
    pub burst: u32,
}

/// The text kube-scheduler runs for the user's `given` configuration (read from `source`, a
/// file name for messages): `clientConnection.kubeconfig` set to `kubeconfig`, the
/// environment's client `rate` where the configuration sets none, and
/// `leaderElection.leaderElect` false, the rest as given. JSON, which is YAML to the scheduler.
pub fn for_environment(
    source: &str,
    given: &str,
    kubeconfig: &Path,
    rate: Option<ClientRate>,
) -> Result<String, SchedulerConfigError> {
    let refuse = |message: String| SchedulerConfigError::NotConfiguration {
        file: source.to_owned(),
        message,
    };
    let value: Value =
        serde_saphyr::from_str(given).map_err(|error| SchedulerConfigError::NotYaml {
            file: source.to_owned(),
            error: error.to_string(),
        })?;
    let Value::Object(mut config) = value else {
        return Err(refuse(
            "expected a mapping (apiVersion, kind, profiles, ...)".to_owned(),
        ));
    };
    let text = |field: &str| config.get(field).and_then(Value::as_str).unwrap_or("");
    if text("kind") != KIND {
        return Err(refuse(format!(
            "kind is {:?}, expected {KIND}",
            text("kind")
        )));
    }
    if !text("apiVersion").starts_with(API_GROUP) {
        return Err(refuse(format!(
            "apiVersion is {:?}, expected {API_GROUP}v1",
            text("apiVersion")
        )));
    }
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let connection = section(&mut config, "clientConnection", source)?;
    connection.insert("kubeconfig".to_owned(), Value::String(kubeconfig));
    if let Some(rate) = rate {
        connection.entry("qps").or_insert(rate.qps.into());
        connection.entry("burst").or_insert(rate.burst.into());
    }
    section(&mut config, "leaderElection", source)?.insert("leaderElect".to_owned(), false.into());
    serde_json::to_string_pretty(&config).map_err(|error| refuse(error.to_string()))
}

/// The mapping `field` of `config`, created when absent.
fn section<'a>(
    config: &'a mut Map<String, Value>,
    field: &str,
    source: &str,
) -> Result<&'a mut Map<String, Value>, SchedulerConfigError> {
    let entry = config
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if entry.is_null() {
        *entry = Value::Object(Map::new());
    }
    entry
        .as_object_mut()
        .ok_or_else(|| SchedulerConfigError::NotConfiguration {
            file: source.to_owned(),
            message: format!("{field} must be a mapping"),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const PACKED: &str = "\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /home/me/.kube/config
  qps: 200
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
";

    fn run(given: &str) -> Result<Value, SchedulerConfigError> {
        let text = for_environment(
            "packed.yaml",
            given,
            Path::new("/env/scheduler.kubeconfig"),
            Some(ClientRate {
                qps: 5000.0,
                burst: 10_000,
            }),
        )?;
        Ok(serde_json::from_str(&text).unwrap())
    }

    #[test]
    fn the_environment_sets_where_to_connect_and_keeps_the_rest() {
        let config = run(PACKED).unwrap();
        assert_eq!(
            config["clientConnection"]["kubeconfig"],
            "/env/scheduler.kubeconfig"
        );
        // The user's rate stands; what the user left out comes from the environment.
        assert_eq!(config["clientConnection"]["qps"], 200);
        assert_eq!(config["clientConnection"]["burst"], 10_000);
        assert_eq!(config["leaderElection"]["leaderElect"], false);
        assert_eq!(
            config["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"]["type"],
            "MostAllocated"
        );
    }

    #[test]
    fn sections_the_user_left_out_are_added() {
        let config =
            run("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
                .unwrap();
        assert_eq!(
            config["clientConnection"]["kubeconfig"],
            "/env/scheduler.kubeconfig"
        );
        assert_eq!(config["leaderElection"]["leaderElect"], false);
    }

    #[test]
    fn other_documents_are_refused_by_name() {
        let error = run("apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "scheduler configuration packed.yaml: kind is \"ConfigMap\", expected KubeSchedulerConfiguration"
        );
        let error = run("apiVersion: v1\nkind: KubeSchedulerConfiguration\n").unwrap_err();
        assert!(
            error.to_string().contains("apiVersion is \"v1\""),
            "{error}"
        );
        let error = run("- a\n- b\n").unwrap_err();
        assert!(error.to_string().contains("expected a mapping"), "{error}");
        let error = run("kind: [unclosed\n").unwrap_err();
        assert!(
            matches!(error, SchedulerConfigError::NotYaml { .. }),
            "{error}"
        );
        let error = run(&format!("{PACKED}leaderElection: 3\n")).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("leaderElection must be a mapping"),
            "{error}"
        );
    }
}
