//! `ksim experiment run-one`: one run of an experiment in an embedded environment of its own,
//! started for it and stopped after it. What a fanned-out experiment's Job runs in each pod
//! (`--from-cluster`: the bundle fetched from, and the report handed back to, the namespace's
//! ConfigMaps), and what a user runs to try one run of a file by hand (`-f`, `--report`).

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::ConfigMap;
use ksim_experiment::experiment::Experiment;
use ksim_localenv::environment::{EnvironmentOptions, EnvironmentProcess};
use ksim_proto::ksim::driver::v1::SimulationState;
use ksim_report::Report;

use ksim_fanout::{bundle, job, store};

use super::plan;
use crate::{
    driver::DriverArgs,
    run::{run_simulation, spec, state_name},
};

#[derive(Debug, Args)]
pub struct RunOneArgs {
    /// The experiment file (as `ksim experiment run` takes it).
    #[arg(
        short = 'f',
        long = "file",
        value_name = "EXPERIMENT.yaml",
        required_unless_present = "from_cluster",
        conflicts_with = "from_cluster"
    )]
    pub file: Option<PathBuf>,

    /// Which run, from 0: each variant's repeats in turn, variant after variant. In a Job,
    /// its completion index.
    #[arg(long, env = "JOB_COMPLETION_INDEX", value_name = "N")]
    pub index: u32,

    /// The runs a Job's completion indexes stand for, in order (a resumed experiment's Job runs
    /// only those it lacks); default: index N is run N.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub runs: Vec<u32>,

    /// Write the run's report (JSON) to this file.
    #[arg(long, value_name = "FILE", conflicts_with = "from_cluster")]
    pub report: Option<PathBuf>,

    /// The experiment id whose bundle to fetch from the namespace's ConfigMaps, and under
    /// which to hand the report back there (what `ksim experiment run --cluster` puts in its
    /// Job).
    #[arg(long, value_name = "ID", requires = "namespace")]
    pub from_cluster: Option<String>,

    /// The namespace of `--from-cluster`.
    #[arg(long, env = "KSIM_POD_NAMESPACE")]
    pub namespace: Option<String>,

    /// The Job that owns the report's ConfigMaps (deleting the Job deletes them): its name.
    #[arg(long, env = "KSIM_JOB_NAME", value_name = "NAME", requires = "job_uid")]
    pub job_name: Option<String>,

    /// ... and its uid.
    #[arg(long, env = "KSIM_JOB_UID", value_name = "UID", requires = "job_name")]
    pub job_uid: Option<String>,

    /// Where the embedded environment keeps its state.
    #[arg(long, env = "KSIM_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// The embedded environment's first port, as `ksim up --port-base` (runs side by side on
    /// one machine need bases of their own; a pod has its own network).
    #[arg(long, env = "KSIM_PORT_BASE", value_name = "PORT",
          value_parser = clap::value_parser!(u16).range(
              i64::from(ksim_localenv::environment::services::MIN_PORT_BASE)..=i64::from(ksim_localenv::environment::services::MAX_PORT_BASE)))]
    pub port_base: Option<u16>,

    /// The cluster of `--from-cluster` (its kubeconfig and context; in a pod, its account).
    #[command(flatten)]
    pub kube: ksim_kube::KubeArgs,
}

pub async fn run(args: RunOneArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    let work = tempfile::tempdir().context("creating a working directory")?;
    let run_index = match args.runs.as_slice() {
        [] => args.index,
        runs => *runs.get(args.index as usize).with_context(|| {
            format!(
                "--index {} is past the {} runs of --runs",
                args.index,
                runs.len()
            )
        })?,
    };
    let (experiment, paths, cluster) = match (&args.file, &args.from_cluster) {
        (Some(file), _) => {
            let (experiment, _) = plan::read(file)?;
            let base = file.parent().unwrap_or(Path::new(".")).to_owned();
            let paths: BTreeMap<String, PathBuf> = plan::named_files(&experiment)?
                .into_iter()
                .map(|written| {
                    let path = base.join(&written);
                    (written, path)
                })
                .collect();
            (experiment, paths, None)
        }
        (None, Some(id)) => {
            let namespace = args.namespace.clone().context("--namespace is needed")?;
            let client = args.kube.connect().await?.client;
            let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, &namespace);
            let mut blobs = store::complete(&api, id, store::Blobs::Bundle).await?;
            let blob = blobs.remove(store::BUNDLE_BLOB).with_context(|| {
                format!("experiment {id}: no complete bundle among the ConfigMaps of {namespace}")
            })?;
            let bundle = bundle::Bundle::decode(&blob)
                .with_context(|| format!("experiment {id}: the bundle"))?;
            let (experiment, paths) = plan::unpack(&bundle, work.path())?;
            (experiment, paths, Some((api, id.clone())))
        }
        (None, None) => anyhow::bail!("give -f FILE or --from-cluster ID"),
    };
    if let Some(path) = &args.report {
        // Checked before the environment starts: never written over the experiment or a file
        // it names.
        let mut inputs: Vec<&Path> = paths.values().map(PathBuf::as_path).collect();
        inputs.extend(args.file.as_deref());
        crate::files::check_output_of(&report_label(path), path, &inputs)?;
    }
    let run = plan::runs(&experiment)
        .into_iter()
        .find(|run| run.index == run_index)
        .with_context(|| {
            format!(
                "run {run_index}: the experiment has {} variants x {} repeats",
                experiment.variants.len(),
                experiment.repeats
            )
        })?;
    let (state, report) = run_in_fresh_env(
        &experiment,
        run,
        &paths,
        (args.state_dir, args.port_base),
        &mut out,
    )
    .await?;
    let json = serde_json::to_vec_pretty(&report)?;
    if let Some(path) = &args.report {
        crate::files::write_whole(&report_label(path), path, &json)?;
        writeln!(out, "ksim experiment: report in {}", path.display())?;
    }
    // Only a finished run's report is handed back; a failed one exits non-zero and the Job's
    // backoff tries it again.
    if state != SimulationState::Succeeded {
        anyhow::bail!("run {} {}", run.index, state_name(state));
    }
    if let Some((api, id)) = cluster {
        let owner = match (&args.job_name, &args.job_uid) {
            (Some(name), Some(uid)) => Some(job::job_owner(name, uid)),
            _ => None,
        };
        let blob = bundle::compress(&json).context("compressing the report")?;
        let kind = store::report_blob(run.index);
        let pieces = store::pieces(
            &id,
            &format!("ksim-{id}-{kind}"),
            &kind,
            &blob,
            owner.as_ref(),
        );
        store::put(&api, &pieces).await?;
        writeln!(
            out,
            "ksim experiment: report of run {} handed back",
            run.index
        )?;
    }
    Ok(())
}

fn report_label(path: &Path) -> String {
    format!("--report {}", path.display())
}

/// The run's report, from an environment started for it alone (cluster-autoscaler or Karpenter
/// as the variant asks) and stopped before returning.
async fn run_in_fresh_env(
    experiment: &Experiment,
    run: plan::Run,
    paths: &BTreeMap<String, PathBuf>,
    (state_dir, port_base): (Option<PathBuf>, Option<u16>),
    out: &mut impl Write,
) -> anyhow::Result<(SimulationState, Report)> {
    let variant = experiment
        .variants
        .get(run.variant)
        .context("the run's variant")?;
    let find = |written: &str| {
        paths
            .get(written)
            .cloned()
            .unwrap_or_else(|| written.into())
    };
    let run_args = super::run_args(experiment, variant, &find, &DriverArgs { url: None })
        .with_context(|| format!("variant {}", variant.name))?;
    let spec = spec::build(&run_args).with_context(|| format!("variant {}", variant.name))?;
    writeln!(
        out,
        "ksim experiment: run {} (variant {}, repeat {} of {}), starting its environment",
        run.index, variant.name, run.repeat, experiment.repeats
    )?;
    // Karpenter offers the file's instance types at the variant's prices, as `ksim up
    // --karpenter --instance-type ... --provider-config ...` would.
    let karpenter = super::karpenter::files(experiment, variant, &find);
    let started_with_karpenter = karpenter.is_some();
    let (instance_types, provider_config) = karpenter.map_or((Vec::new(), None), |files| {
        (files.skeletons, files.provider_config)
    });
    let env = EnvironmentProcess::start(&EnvironmentOptions {
        autoscaler: variant.autoscaler_in(experiment),
        karpenter: started_with_karpenter,
        instance_types,
        provider_config,
        state_dir,
        port_base: port_base.unwrap_or(ksim_localenv::environment::services::DEFAULT_PORT_BASE),
        ..EnvironmentOptions::default()
    })
    .await?;
    let driver = env.state().urls.driver.clone();
    let outcome = run_simulation(&driver, spec, out, false).await;
    env.shutdown().await;
    let outcome = outcome?;
    let state = outcome.simulation.state();
    writeln!(
        out,
        "ksim experiment: run {} {}",
        run.index,
        state_name(state)
    )?;
    Ok((state, outcome.report))
}

#[cfg(test)]
mod tests {
    use clap::{Args as _, FromArgMatches as _};

    use super::*;

    #[test]
    fn a_report_over_the_experiment_or_a_file_it_names_is_refused_before_an_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("exp.yaml");
        std::fs::write(&file, "trace: t.ktrace\nvariants: [{name: a}]\n").unwrap();
        let trace = dir.path().join("t.ktrace");
        std::fs::write(&trace, b"the recording").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for input in [&file, &trace] {
            // Run 5 of a file of one: a check that let the output by would end on that, never
            // starting an environment.
            let argv = [
                "run-one",
                "-f",
                file.to_str().unwrap(),
                "--index",
                "5",
                "--report",
                input.to_str().unwrap(),
            ];
            let command = RunOneArgs::augment_args(clap::Command::new("run-one"));
            let matches = command.try_get_matches_from(argv).unwrap();
            let args = RunOneArgs::from_arg_matches(&matches).unwrap();
            let error = runtime.block_on(run(args)).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!(
                    "the output --report {} is the input {}; write to another file",
                    input.display(),
                    input.display()
                )
            );
        }
        assert_eq!(std::fs::read(&trace).unwrap(), b"the recording");
    }
}
