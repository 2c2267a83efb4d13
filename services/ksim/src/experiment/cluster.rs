//! `ksim experiment run --cluster`: the experiment's runs as the completions of one Indexed Job
//! on a Kubernetes cluster (no controller of ksim's own), each pod a whole simulation of its
//! own; the reports come back through ConfigMaps (`store`) and are compared as a local
//! experiment's are.
//!
//! Everything is checked before anything is created (the Job and a ConfigMap are created with
//! `dryRun`, the run account looked up); the bundle's ConfigMaps and the reports' are owned by
//! the Job, so deleting it (Ctrl-C, or the end) deletes what the experiment made.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::{
    batch::v1::Job,
    core::v1::{ConfigMap, Pod, ServiceAccount},
};
use ksim_experiment::experiment::Experiment;
use ksim_proto::ksim::driver::v1::SimulationState;
use ksim_report::Report;
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy},
};
use serde::{Deserialize, Serialize};

use ksim_fanout::{
    bundle::{self, Bundle},
    job::{self, JobPlan},
    runs::{RunState, completion_index, failed_indexes, pending_reason, pull_failure},
    store,
};

use super::{Finished, VariantRuns, plan, progress::Bars};

/// How often the Job, its pods and the reports are looked at.
const POLL: Duration = Duration::from_secs(2);

/// The longest experiment id: the Job's name (`ksim-<id>`) labels its pods, 63 characters.
const MAX_ID_LEN: usize = 40;

#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Run on a Kubernetes cluster instead of the local environment: each variant x repeat is
    /// one completion of an Indexed Job, in a pod of the `ksim-run` image.
    #[arg(long)]
    pub cluster: bool,

    /// The cluster's kubeconfig [default: $KUBECONFIG, ~/.kube/config, or in-cluster].
    #[arg(long, value_name = "FILE", requires = "cluster")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use.
    #[arg(long, value_name = "NAME", requires = "cluster")]
    pub context: Option<String>,

    /// The namespace the Job runs in (with `deploy/experiment/`'s account in it).
    #[arg(
        short = 'n',
        long,
        value_name = "NAMESPACE",
        default_value = "ksim-experiments",
        requires = "cluster"
    )]
    pub namespace: String,

    /// The most runs at once.
    #[arg(long, value_name = "N", default_value_t = 4, requires = "cluster",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub parallel: u32,

    /// The image of one run.
    #[arg(long, value_name = "IMAGE", default_value = job::DEFAULT_IMAGE, requires = "cluster")]
    pub image: String,

    /// The experiment's id: its Job is `ksim-<ID>`, and a re-run with the same id and output
    /// directory runs only the runs whose reports it lacks [default: the file's name and a
    /// digest of it and the files it names].
    #[arg(long, value_name = "ID", requires = "cluster")]
    pub id: Option<String>,

    /// Print the Job and the bundle's ConfigMaps (YAML) instead of creating them.
    #[arg(long, requires = "cluster")]
    pub dry_run: bool,
}

/// What the output directory remembers of a cluster run, so a re-run resumes it.
#[derive(Debug, Serialize, Deserialize)]
struct Resume {
    id: String,
}

pub(super) const RESUME_FILE: &str = "cluster-experiment.json";

/// The experiment's runs on the cluster; every run's outcome, by variant, as a local run gives
/// them.
pub async fn run_all(
    args: &ClusterArgs,
    file: &Path,
    experiment: &Experiment,
    bundle: &Bundle,
    output: &Path,
    out: &mut impl Write,
) -> anyhow::Result<Vec<VariantRuns>> {
    let blob = bundle
        .encode()
        .context("compressing the experiment's bundle")?;
    let id = match &args.id {
        Some(id) => check_id(id)?,
        None => default_id(file, &blob),
    };
    let runs = plan::runs(experiment);
    let mut collected = resumed(&id, experiment, &runs, output, out)?;
    let todo: Vec<u32> = runs
        .iter()
        .map(|run| run.index)
        .filter(|index| !collected.contains_key(index))
        .collect();
    let (peak_nodes, events_per_minute) = plan::load(experiment, bundle)?;
    let plan = JobPlan {
        id: id.clone(),
        namespace: args.namespace.clone(),
        image: args.image.clone(),
        runs: todo.clone(),
        parallelism: args.parallel,
        sizing: job::sizing(peak_nodes, events_per_minute),
    };
    let job = plan.job();
    let pieces = store::pieces(
        &id,
        &format!("ksim-{id}-bundle"),
        store::BUNDLE_BLOB,
        &blob,
        None,
    );
    if args.dry_run {
        writeln!(out, "{}", serde_saphyr::to_string(&job)?)?;
        for piece in &pieces {
            writeln!(out, "---\n{}", serde_saphyr::to_string(piece)?)?;
        }
        return Ok(Vec::new());
    }
    if !todo.is_empty() {
        let client = connect(args).await?;
        let namespace = &args.namespace;
        let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        preflight(&client, namespace, &jobs, &maps, &job, &pieces).await?;
        // Only now, with the cluster ready to take the Job, does anything appear locally.
        std::fs::create_dir_all(output)
            .with_context(|| format!("creating {}", output.display()))?;
        let resume = serde_json::to_vec_pretty(&Resume { id: id.clone() })?;
        let resume_path = output.join(RESUME_FILE);
        crate::files::write_whole(&resume_path.display().to_string(), &resume_path, &resume)?;
        writeln!(
            out,
            "ksim experiment: experiment {id}: {} of {} runs on the cluster (namespace {namespace}, \
             {} at once, {} CPU and {} MiB each), {} already collected",
            todo.len(),
            runs.len(),
            plan.parallelism
                .min(u32::try_from(todo.len()).unwrap_or(u32::MAX)),
            f64::from(plan.sizing.cpu_millis) / 1000.0,
            plan.sizing.memory_mib,
            collected.len()
        )?;
        let ended = match create(&jobs, &maps, &job, pieces).await {
            Ok(()) => {
                let follow = follow(
                    &plan,
                    experiment,
                    &jobs,
                    &maps,
                    &pods,
                    output,
                    &mut collected,
                    out,
                );
                // Ctrl-C or SIGTERM: None, then the cleanup below.
                tokio::select! {
                    outcome = follow => Some(outcome),
                    signal = ksim_grpc::shutdown_signal() => signal.err().map(|e| Err(e.into())),
                }
            }
            Err(error) => Some(Err(error)),
        };
        let cleaned = delete_all(&jobs, &maps, &id).await;
        match ended {
            Some(outcome) => outcome?,
            None => anyhow::bail!(
                "interrupted: the Job and its ConfigMaps are deleted; {} of {} reports are in {} \
                 (run the same command again to resume experiment {id})",
                collected.len(),
                runs.len(),
                output.display()
            ),
        }
        cleaned?;
    }

    let mut variants: Vec<VariantRuns> = experiment
        .variants
        .iter()
        .map(|variant| VariantRuns {
            name: variant.name.clone(),
            runs: Vec::new(),
        })
        .collect();
    for run in &runs {
        let finished = match collected.remove(&run.index) {
            Some(report) => Finished {
                id: format!("{id}/{}", run.index),
                state: SimulationState::Succeeded,
                report: Some(report),
            },
            None => Finished {
                id: format!("{id}/{}", run.index),
                state: SimulationState::Failed,
                report: None,
            },
        };
        if let Some(variant) = variants.get_mut(run.variant) {
            variant.runs.push(finished);
        }
    }
    Ok(variants)
}

/// A report file's path in the output directory, as a local experiment writes it.
pub(super) fn report_path(output: &Path, experiment: &Experiment, run: &plan::Run) -> PathBuf {
    let name = experiment
        .variants
        .get(run.variant)
        .map_or("?", |variant| variant.name.as_str());
    output
        .join(name)
        .join(run.repeat.to_string())
        .join("report.json")
}

/// The reports an earlier invocation with this id already collected.
fn resumed(
    id: &str,
    experiment: &Experiment,
    runs: &[plan::Run],
    output: &Path,
    out: &mut impl Write,
) -> anyhow::Result<BTreeMap<u32, Report>> {
    let mut collected = BTreeMap::new();
    let path = output.join(RESUME_FILE);
    let Ok(bytes) = crate::files::read_bounded(&path, 4096, "the resume file") else {
        return Ok(collected);
    };
    let same = serde_json::from_slice::<Resume>(&bytes).is_ok_and(|resume| resume.id == id);
    if !same {
        return Ok(collected);
    }
    for run in runs {
        let path = report_path(output, experiment, run);
        if let Ok(bytes) = crate::files::read_bounded(&path, bundle::MAX_UNPACKED_BYTES, "a report")
            && let Ok(report) = serde_json::from_slice::<Report>(&bytes)
            // One that is not a report ksim wrote is run again, as one that does not parse.
            && ksim_report::check_timeline(&report).is_ok()
        {
            collected.insert(run.index, report);
        }
    }
    if !collected.is_empty() {
        writeln!(
            out,
            "ksim experiment: resuming experiment {id}: {} reports already in {}",
            collected.len(),
            output.display()
        )?;
    }
    Ok(collected)
}

/// An id as given, if it can name the Job and label its objects.
fn check_id(id: &str) -> anyhow::Result<String> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !id.starts_with('-')
        && !id.ends_with('-');
    if !ok {
        anyhow::bail!(
            "--id {id:?}: at most {MAX_ID_LEN} lowercase letters, digits and '-', starting and \
             ending with a letter or digit"
        );
    }
    Ok(id.to_owned())
}

/// The file's stem, made a DNS label, and the first 8 hex digits of the bundle's digest: the
/// same files give the same id, a changed file another.
fn default_id(file: &Path, blob: &[u8]) -> String {
    let stem = file
        .file_stem()
        .map(|stem| stem.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let mut name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(MAX_ID_LEN - 9);
    let name = name.trim_matches('-');
    let name = if name.is_empty() { "experiment" } else { name };
    format!("{name}-{}", &bundle::digest(blob)[..8])
}

async fn connect(args: &ClusterArgs) -> anyhow::Result<kube::Client> {
    let connected = ksim_kube::connect(args.kubeconfig.as_deref(), args.context.as_deref())
        .await
        .context("--cluster")?;
    Ok(connected.client)
}

/// Every check that can fail before anything exists: the cluster answers, the namespace
/// exists, the user may create the Job and the ConfigMaps (the server's own dry run, with its
/// admission), the run account is there, and no Job of this experiment is still around.
async fn preflight(
    client: &kube::Client,
    namespace: &str,
    jobs: &Api<Job>,
    maps: &Api<ConfigMap>,
    job: &Job,
    pieces: &[ConfigMap],
) -> anyhow::Result<()> {
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let name = job.metadata.name.clone().unwrap_or_default();
    match jobs.get_opt(&name).await {
        Ok(Some(_)) => anyhow::bail!(
            "Job {name} already exists in namespace {namespace} (this experiment is running, or \
             an earlier run was killed): wait for it, or `kubectl -n {namespace} delete job {name}`"
        ),
        Ok(None) => {}
        Err(error) => return Err(api_error(error, namespace, "look up Jobs")),
    }
    jobs.create(&dry, job)
        .await
        .map_err(|error| api_error(error, namespace, "create Jobs"))?;
    if let Some(piece) = pieces.first() {
        maps.create(&dry, piece)
            .await
            .map_err(|error| api_error(error, namespace, "create ConfigMaps"))?;
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    match accounts.get_opt(job::RUN_SERVICE_ACCOUNT).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => anyhow::bail!(
            "namespace {namespace} has no ServiceAccount {}: apply deploy/experiment/ there \
             (kubectl apply -k deploy/experiment -n {namespace})",
            job::RUN_SERVICE_ACCOUNT
        ),
        Err(error) => Err(api_error(error, namespace, "look up ServiceAccounts")),
    }
}

/// An API error as one line saying what to do about it.
fn api_error(error: kube::Error, namespace: &str, what: &str) -> anyhow::Error {
    match &error {
        // The apiserver's NotFound names the kind missing: the namespace, not the object.
        kube::Error::Api(status)
            if status.code == 404
                && status
                    .details
                    .as_ref()
                    .is_some_and(|d| d.kind == "namespaces") =>
        {
            anyhow::anyhow!("namespace {namespace} does not exist on the cluster")
        }
        kube::Error::Api(status) if status.code == 403 => anyhow::anyhow!(
            "no permission to {what} in namespace {namespace}: {} (the least an experiment \
             needs is deploy/experiment/'s ksim-experimenter Role)",
            status.message
        ),
        kube::Error::Api(status) => {
            anyhow::anyhow!("cannot {what} in namespace {namespace}: {}", status.message)
        }
        other => anyhow::anyhow!("cannot reach the cluster: {other}"),
    }
}

/// The Job (suspended), the bundle's ConfigMaps owned by it, then the Job resumed: no pod runs
/// before its bundle is whole, and deleting the Job deletes the bundle.
async fn create(
    jobs: &Api<Job>,
    maps: &Api<ConfigMap>,
    job: &Job,
    mut pieces: Vec<ConfigMap>,
) -> anyhow::Result<()> {
    let created = jobs
        .create(&PostParams::default(), job)
        .await
        .context("creating the Job")?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let owner = job::job_owner(&name, created.metadata.uid.as_deref().unwrap_or_default());
    for piece in &mut pieces {
        piece.metadata.owner_references = Some(vec![owner.clone()]);
    }
    store::put(maps, &pieces).await?;
    let resume = serde_json::json!({ "spec": { "suspend": false } });
    jobs.patch(&name, &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .context("starting the Job")?;
    Ok(())
}

/// The Job and every ConfigMap of the experiment.
async fn delete_all(jobs: &Api<Job>, maps: &Api<ConfigMap>, id: &str) -> anyhow::Result<()> {
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match jobs.delete(&job::job_name(id), &background).await {
        Ok(_) => {}
        Err(error) if ksim_kube::is_not_found(&error) => {}
        Err(error) => return Err(error).context("deleting the Job"),
    }
    // The garbage collector would delete them with the Job; deleting them here means nothing
    // is left when the command returns.
    let selector = format!("{}={id}", store::EXPERIMENT_LABEL);
    let left = maps
        .list(&ListParams::default().labels(&selector))
        .await
        .context("listing the experiment's ConfigMaps")?;
    for map in left.items {
        let name = map.metadata.name.unwrap_or_default();
        match maps.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(error) if ksim_kube::is_not_found(&error) => {}
            Err(error) => return Err(error).with_context(|| format!("deleting ConfigMap {name}")),
        }
    }
    Ok(())
}

/// Follows the Job until every run's report is collected or the run has failed for good,
/// writing each report as it arrives (and deleting its ConfigMaps).
#[allow(clippy::too_many_arguments)]
async fn follow(
    plan: &JobPlan,
    experiment: &Experiment,
    jobs: &Api<Job>,
    maps: &Api<ConfigMap>,
    pods: &Api<Pod>,
    output: &Path,
    collected: &mut BTreeMap<u32, Report>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let runs = plan::runs(experiment);
    let name = job::job_name(&plan.id);
    let started = Instant::now();
    let mut states: BTreeMap<u32, RunState> = plan
        .runs
        .iter()
        .map(|run| (*run, RunState::Waiting))
        .collect();
    let bars = Bars::new(&runs, experiment, &plan.runs);
    loop {
        // Reports first: a run whose pod has just exited has handed its report back.
        for (kind, blob) in store::complete(maps, &plan.id, store::Blobs::Reports).await? {
            let Some(index) = kind
                .strip_prefix("report-")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let (Some(run), false) = (
                runs.iter().find(|run| run.index == index),
                collected.contains_key(&index),
            ) else {
                continue;
            };
            let json =
                bundle::decompress(&blob).with_context(|| format!("run {index}'s report"))?;
            let report: Report = serde_json::from_slice(&json)
                .with_context(|| format!("run {index}'s report is not a report"))?;
            ksim_report::check_timeline(&report)
                .with_context(|| format!("run {index}'s report"))?;
            let path = report_path(output, experiment, run);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            crate::files::write_whole(&path.display().to_string(), &path, &json)?;
            collected.insert(index, report);
            let selector = format!(
                "{}={},{}={kind}",
                store::EXPERIMENT_LABEL,
                plan.id,
                store::BLOB_LABEL
            );
            maps.delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&selector),
            )
            .await
            .with_context(|| format!("deleting run {index}'s report ConfigMaps"))?;
        }
        let job = jobs.get(&name).await.context("reading the Job")?;
        let failed = failed_indexes(&job)
            .into_iter()
            .filter_map(|completion| plan.runs.get(completion as usize).copied())
            .collect::<BTreeSet<u32>>();
        let pod_list = pods
            .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
            .await
            .context("listing the Job's pods")?;
        let mut pod_states: BTreeMap<u32, RunState> = BTreeMap::new();
        for pod in &pod_list.items {
            let Some(index) =
                completion_index(pod).and_then(|i| plan.runs.get(i as usize).copied())
            else {
                continue;
            };
            if let Some((reason, message)) = pull_failure(pod) {
                anyhow::bail!(
                    "the image {} cannot be pulled ({reason}: {message}); nothing ran",
                    plan.image
                );
            }
            let attempt = pod_list
                .items
                .iter()
                .filter(|other| completion_index(other) == completion_index(pod))
                .count();
            let state = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Running") => RunState::Running {
                    attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
                },
                Some("Pending") => RunState::Pending(pending_reason(pod)),
                _ => continue,
            };
            pod_states.insert(index, state);
        }
        for (index, state) in &mut states {
            let next = if collected.contains_key(index) {
                RunState::Collected
            } else if failed.contains(index) {
                RunState::Failed
            } else {
                pod_states.remove(index).unwrap_or(RunState::Waiting)
            };
            if *state != next {
                bars.set(*index, &next, started.elapsed(), out)?;
                *state = next;
            }
        }
        let done = states
            .values()
            .all(|state| matches!(state, RunState::Collected | RunState::Failed));
        if done {
            bars.finish();
            return Ok(());
        }
        let job_failed = job
            .status
            .as_ref()
            .and_then(|status| status.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Failed" && c.status == "True")
            });
        if job_failed && pod_list.items.is_empty() {
            bars.finish();
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_a_job_and_the_default_one_follows_the_files() {
        assert_eq!(check_id("day-1").unwrap(), "day-1");
        for bad in ["", "Day", "-day", "day-", "a_b", &"x".repeat(41)] {
            let error = check_id(bad).unwrap_err().to_string();
            assert!(error.starts_with("--id "), "{error}");
        }
        let id = default_id(Path::new("dir/My Day.v2.yaml"), b"one");
        assert!(
            id.starts_with("my-day-v2-") && id.len() == "my-day-v2-".len() + 8,
            "{id}"
        );
        check_id(&id).unwrap();
        assert_ne!(id, default_id(Path::new("dir/My Day.v2.yaml"), b"two"));
        let long = default_id(Path::new(&format!("{}.yaml", "a".repeat(80))), b"x");
        check_id(&long).unwrap();
    }
}
