//! `ksim experiment run -f FILE`: every variant of an experiment, each repeated, in turn through
//! the driver (which applies each variant's configuration and leaves nothing between runs), or
//! fanned out over a cluster as a Job (`cluster`), then their comparison and the `--assert`ions
//! over it. `ksim experiment run-one` is one run in an environment of its own (`worker`).

mod cluster;
mod karpenter;
mod plan;
mod progress;
mod worker;

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::Context;
use clap::{Args, Subcommand};
use ksim_experiment::{
    assertions::{Assertion, Stat, VariantFigures},
    experiment::{Experiment, Variant},
};
use ksim_proto::ksim::driver::v1::{SimulationSpec, SimulationState};
use ksim_report::{Comparison, Report};

use crate::{
    driver::DriverArgs,
    run::{OnError, RunArgs, groups, run_simulation, spec, state_name},
};

#[derive(Debug, Subcommand)]
pub enum ExperimentCommand {
    /// Run every variant of an experiment file, compare them and check the assertions.
    Run(ExperimentArgs),
    /// Run one run of an experiment in an embedded environment started for it (what each pod
    /// of `run --cluster` does).
    RunOne(worker::RunOneArgs),
}

#[derive(Debug, Args)]
pub struct ExperimentArgs {
    /// The experiment file (YAML): `trace`, `speed`, `repeats`, `autoscaler`, `nodeGroups`,
    /// `autoscalerGroups`, `nodePools`, `instanceTypes`, `providerConfig`, `settle`,
    /// `provisioning`, `replicas`, `nodeFailures`, `zoneOutages`, `stockouts`,
    /// `spotInterruptions`, `nodePoolUpgrades`, `replayFailures`, `disruptionSeed`, `explain`,
    /// and `variants` (each `name` and any of `schedulerConfig`, `autoscaler`, `autoscalerArgs`,
    /// `providerConfig`, `transform`, `nodeGroups`, `autoscalerGroups`, `nodePools`, `speed`,
    /// `provisioning`, `replicas`, `nodeFailures`, `zoneOutages`, `stockouts`,
    /// `spotInterruptions`, `nodePoolUpgrades`, `replayFailures`). Paths are relative to it.
    #[arg(short = 'f', long = "file", value_name = "EXPERIMENT.yaml")]
    pub file: PathBuf,

    /// A CEL expression that must hold over the comparison (repeatable), e.g.
    /// `variants.packed.cost <= variants.baseline.cost * 0.95`; the exit is non-zero when one
    /// does not.
    #[arg(long = "assert", value_name = "CEL")]
    pub assertions: Vec<String>,

    /// Where the reports and the comparison go; default `<EXPERIMENT>-results` beside the file.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,

    #[command(flatten)]
    pub driver: DriverArgs,

    #[command(flatten)]
    pub cluster: cluster::ClusterArgs,
}

pub async fn run(command: ExperimentCommand) -> anyhow::Result<()> {
    let args = match command {
        ExperimentCommand::Run(args) => args,
        ExperimentCommand::RunOne(args) => return worker::run(args).await,
    };
    let (experiment, _) = plan::read(&args.file)?;
    // Everything is checked before the first simulation: assertions, files, groups.
    let assertions = args
        .assertions
        .iter()
        .map(|source| Assertion::compile(source))
        .collect::<Result<Vec<_>, _>>()?;
    let variant_names: Vec<&str> = experiment
        .variants
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    for assertion in &assertions {
        assertion.check_names(&variant_names, &ksim_report::FIGURES)?;
    }
    let base = args.file.parent().unwrap_or(Path::new("."));
    // Every variant's files are read and checked here, whichever way it runs.
    let mut specs = Vec::new();
    for variant in &experiment.variants {
        let run_args = run_args(&experiment, variant, &|file| base.join(file), &args.driver)
            .with_context(|| format!("variant {}", variant.name))?;
        let spec = spec::build(&run_args).with_context(|| format!("variant {}", variant.name))?;
        specs.push((variant.name.clone(), spec));
    }
    let bundle = if args.cluster.cluster {
        Some(plan::bundle(&args.file)?.1)
    } else {
        None
    };
    let output = match &args.output {
        Some(dir) => dir.clone(),
        None => {
            let stem = args.file.file_stem().unwrap_or_default().to_string_lossy();
            base.join(format!("{stem}-results"))
        }
    };
    check_outputs(&args.file, &experiment, &output)?;
    let mut out = std::io::stdout();
    let runs = match &bundle {
        Some(bundle) => {
            let runs = cluster::run_all(
                &args.cluster,
                &args.file,
                &experiment,
                bundle,
                &output,
                &mut out,
            )
            .await?;
            if args.cluster.dry_run {
                return Ok(());
            }
            runs
        }
        None => {
            karpenter::check_environment(&experiment, base, &args.driver)?;
            std::fs::create_dir_all(&output)
                .with_context(|| format!("creating {}", output.display()))?;
            run_all(
                &args.driver.resolve()?,
                &specs,
                experiment.repeats,
                &output,
                &mut out,
            )
            .await?
        }
    };
    let comparison = write_comparison(&runs, &output)?;
    write!(out, "{}", comparison.table())?;
    for variant in &runs {
        let states: Vec<String> = variant
            .runs
            .iter()
            .map(|run| format!("{} {}", run.id, state_name(run.state)))
            .collect();
        writeln!(out, "  {}: {}", variant.name, states.join(", "))?;
    }
    writeln!(
        out,
        "ksim experiment: reports and comparison in {}",
        output.display()
    )?;

    let figures = variant_figures(&runs, &comparison);
    let mut failed = Vec::new();
    for assertion in &assertions {
        match assertion.holds(&figures) {
            Ok(true) => writeln!(out, "  assert ok:     {}", assertion.source())?,
            Ok(false) => {
                writeln!(out, "  assert FAILED: {}", assertion.source())?;
                failed.push(assertion.source().to_owned());
            }
            Err(error) => {
                writeln!(out, "  assert FAILED: {error}")?;
                failed.push(assertion.source().to_owned());
            }
        }
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "{} of {} assertions failed: {}",
            failed.len(),
            assertions.len(),
            failed.join("; ")
        );
    }
    let total: usize = runs.iter().map(|v| v.runs.len()).sum();
    let unfinished = runs
        .iter()
        .flat_map(|v| &v.runs)
        .filter(|run| run.state != SimulationState::Succeeded)
        .count();
    if unfinished > 0 {
        anyhow::bail!("{unfinished} of {total} runs did not succeed");
    }
    Ok(())
}

/// The comparison's files in the output directory, beside each run's report.
const COMPARISON_FILES: [&str; 3] = ["comparison.json", "comparison.txt", "comparison.svg"];
/// The comparison as a web page, beside them when the charting library is there.
const COMPARISON_PAGE: &str = "comparison.html";

/// Refuses, before anything runs, an output the experiment would write over one of its inputs
/// (the experiment file or a file it names, through any path or link): each run's report, the
/// comparison, a cluster run's resume file.
fn check_outputs(file: &Path, experiment: &Experiment, output: &Path) -> anyhow::Result<()> {
    let base = file.parent().unwrap_or(Path::new("."));
    let mut inputs = vec![file.to_owned()];
    inputs.extend(
        plan::named_files(experiment)?
            .iter()
            .map(|written| base.join(written)),
    );
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let reports = plan::runs(experiment)
        .into_iter()
        .map(|run| cluster::report_path(output, experiment, &run));
    let others = COMPARISON_FILES
        .iter()
        .chain([&COMPARISON_PAGE, &cluster::RESUME_FILE])
        .map(|name| output.join(name));
    for path in reports.chain(others) {
        crate::files::check_output_of(&path.display().to_string(), &path, &inputs)?;
    }
    Ok(())
}

/// Whether a run failed for want of a driver (no connection could be made, or the URL is
/// none), rather than the driver running it and it failing.
fn driver_unreachable(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<tonic::transport::Error>().is_some())
}

/// `ksim run`'s arguments for one variant, each file the experiment names (as written, relative
/// to the experiment file) found by `path`: beside the file locally, in the bundle in a Job.
fn run_args(
    experiment: &Experiment,
    variant: &Variant,
    path: &dyn Fn(&str) -> PathBuf,
    driver: &DriverArgs,
) -> anyhow::Result<RunArgs> {
    // A group's skeleton is a file the experiment names too: parsed as written, then found.
    let skeleton = |written: &Path| path(&written.to_string_lossy());
    let node_groups = variant
        .node_groups
        .as_ref()
        .unwrap_or(&experiment.node_groups)
        .iter()
        .map(|text| {
            let mut group = groups::parse_node_group(text)
                .map_err(|error| anyhow::anyhow!("node group {text:?}: {error}"))?;
            group.skeleton = skeleton(&group.skeleton);
            Ok(group)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let autoscaler_groups = variant
        .autoscaler_groups
        .as_ref()
        .unwrap_or(&experiment.autoscaler_groups)
        .iter()
        .map(|text| {
            let mut group = groups::parse_autoscaler_group(text)
                .map_err(|error| anyhow::anyhow!("autoscaler group {text:?}: {error}"))?;
            group.skeleton = skeleton(&group.skeleton);
            Ok(group)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let nodepools = variant
        .node_pools_in(experiment)
        .iter()
        .map(|file| path(file))
        .collect();
    for arg in &variant.autoscaler_args {
        arg.parse::<ksim_experiment::AutoscalerFlag>()?;
    }
    use crate::run::disruptions::{
        parse_node_failure, parse_node_pool_upgrade, parse_spot_interruption, parse_stockout,
        parse_zone_outage,
    };
    let parsed = |texts: &[String], what: &str, parse: fn(&str) -> Result<_, String>| {
        texts
            .iter()
            .map(|text| parse(text).map_err(|error| anyhow::anyhow!("{what} {text:?}: {error}")))
            .collect::<anyhow::Result<Vec<_>>>()
    };
    let node_failures = parsed(
        variant.node_failures_in(experiment),
        "node failure",
        parse_node_failure,
    )?;
    let zone_outages = parsed(
        variant.zone_outages_in(experiment),
        "zone outage",
        parse_zone_outage,
    )?;
    let stockouts = parsed(variant.stockouts_in(experiment), "stockout", parse_stockout)?;
    let spot_interruptions = parsed(
        variant.spot_interruptions_in(experiment),
        "spot interruption",
        parse_spot_interruption,
    )?;
    let node_pool_upgrades = parsed(
        variant.node_pool_upgrades_in(experiment),
        "node-pool upgrade",
        parse_node_pool_upgrade,
    )?;
    Ok(RunArgs {
        trace_file: Some(path(&experiment.trace)),
        transform: variant.transform.as_deref().map(path),
        speed: variant.speed_in(experiment),
        duration: None,
        namespace_prefix: None,
        on_error: OnError::Continue,
        node_groups,
        autoscaler_groups,
        autoscaler: variant.autoscaler_in(experiment),
        // A variant's NodePools are its choice of Karpenter; it has no default NodePool.
        karpenter: false,
        nodepools,
        scheduler_config: variant.scheduler_config.as_deref().map(path),
        provider_config: variant.provider_config_in(experiment).map(path),
        // A built-in model by name; a file relative to the experiment file.
        provisioning: variant.provisioning_in(experiment).map(|given| {
            match ksim_provisioning::Model::builtin(given) {
                Ok(_) => given.to_owned(),
                Err(_) => path(given).display().to_string(),
            }
        }),
        autoscaler_args: variant.autoscaler_args.clone(),
        // A stored trace's recorded CA Deployment still applies (the driver reads it).
        autoscaler_flags_file: None,
        reschedule_bare_pods: false,
        settle: experiment.settle,
        replicas: variant
            .replicas_in(experiment)
            .map(|replicas| match replicas {
                ksim_experiment::experiment::Replicas::Recorded => crate::run::Replicas::Recorded,
                ksim_experiment::experiment::Replicas::Hpa => crate::run::Replicas::Hpa,
            }),
        node_failures,
        zone_outages,
        stockouts,
        spot_interruptions,
        node_pool_upgrades,
        disruption_seed: experiment.disruption_seed,
        replay_failures: variant.replay_failures_in(experiment),
        explain: experiment.explain.is_some(),
        explain_per_owner: experiment.explain.unwrap_or(0),
        explain_namespace: Vec::new(),
        repeat: 1,
        stored: false,
        trace_id: None,
        start: None,
        end: None,
        driver: driver.clone(),
    })
}

/// One variant's runs.
struct VariantRuns {
    name: String,
    runs: Vec<Finished>,
}

struct Finished {
    id: String,
    state: SimulationState,
    report: Option<Report>,
}

/// Every variant x repeat in turn; a run's report goes to `<output>/<variant>/<n>/report.json`.
/// A run the driver refuses or that fails is recorded and the next one runs; a cancelled one
/// (Ctrl-C) ends the experiment there, and a driver that cannot be reached ends it with an
/// error (every later run would fail the same way, and a comparison of none is no answer).
async fn run_all(
    driver_url: &str,
    specs: &[(String, SimulationSpec)],
    repeats: u32,
    output: &Path,
    out: &mut impl Write,
) -> anyhow::Result<Vec<VariantRuns>> {
    let mut variants = Vec::new();
    'variants: for (name, spec) in specs {
        let mut runs = Vec::new();
        for round in 1..=repeats {
            writeln!(
                out,
                "ksim experiment: variant {name}, run {round} of {repeats}"
            )?;
            let outcome = match run_simulation(driver_url, spec.clone(), out, false).await {
                Ok(outcome) => outcome,
                Err(error) if driver_unreachable(&error) => {
                    return Err(error.context(format!(
                        "variant {name}, run {round}: the experiment stops, no comparison written"
                    )));
                }
                Err(error) => {
                    writeln!(out, "ksim experiment: variant {name} failed: {error:#}")?;
                    runs.push(Finished {
                        id: "(not started)".to_owned(),
                        state: SimulationState::Failed,
                        report: None,
                    });
                    continue;
                }
            };
            let report = outcome.report;
            // Compared below: its cost must follow its entries (`ksim compare` checks the same).
            ksim_report::check_timeline(&report)
                .with_context(|| format!("variant {name}, run {round}: the driver's report"))?;
            let dir = output.join(name).join(round.to_string());
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let json = serde_json::to_vec_pretty(&report)?;
            let path = dir.join("report.json");
            crate::files::write_whole(&path.display().to_string(), &path, &json)?;
            let state = outcome.simulation.state();
            runs.push(Finished {
                id: outcome.simulation.id.clone(),
                state,
                report: Some(report),
            });
            if state == SimulationState::Cancelled {
                variants.push(VariantRuns {
                    name: name.clone(),
                    runs,
                });
                break 'variants;
            }
        }
        variants.push(VariantRuns {
            name: name.clone(),
            runs,
        });
    }
    Ok(variants)
}

/// The comparison of the variants' succeeded runs (means, spread), written as
/// `comparison.json`, `comparison.txt`, `comparison.svg` (each variant's first run) and
/// `comparison.html`.
fn write_comparison(runs: &[VariantRuns], output: &Path) -> anyhow::Result<Comparison> {
    let repeated: Vec<(String, Vec<&Report>)> = runs
        .iter()
        .map(|variant| (variant.name.clone(), succeeded(variant)))
        .collect();
    let comparison = ksim_report::compare_repeated(&repeated);
    let write = |name: &str, bytes: &[u8]| {
        let path = output.join(name);
        crate::files::write_whole(&path.display().to_string(), &path, bytes)
    };
    let [json, txt, svg] = COMPARISON_FILES;
    write(json, &serde_json::to_vec_pretty(&comparison)?)?;
    write(txt, comparison.table().as_bytes())?;
    let firsts: Vec<(String, Report)> = repeated
        .iter()
        .filter_map(|(name, reports)| Some((name.clone(), (*reports.first()?).clone())))
        .collect();
    write(svg, ksim_report::render_comparison_svg(&firsts)?.as_bytes())?;
    // The comparison as a web page, when the charting library is there: its absence costs the
    // experiment nothing else.
    let page = crate::page::chart_library().and_then(|library| {
        Ok(ksim_report::render_comparison_html(
            &comparison,
            &firsts,
            &library,
        )?)
    });
    match page {
        Ok(page) => write(COMPARISON_PAGE, page.as_bytes())?,
        Err(error) => tracing::warn!("no {COMPARISON_PAGE}: {error:#}"),
    }
    Ok(comparison)
}

/// The reports of a variant's runs that succeeded.
fn succeeded(variant: &VariantRuns) -> Vec<&Report> {
    variant
        .runs
        .iter()
        .filter(|run| run.state == SimulationState::Succeeded)
        .filter_map(|run| run.report.as_ref())
        .collect()
}

/// Per workload of the runs' disruptions: its availability's mean and spread over the runs
/// that had it.
fn availability(reports: &[&Report]) -> BTreeMap<String, Stat> {
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for report in reports {
        for (workload, value) in ksim_report::availability(report) {
            values.entry(workload).or_default().push(value);
        }
    }
    values
        .into_iter()
        .map(|(workload, values)| {
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (workload, Stat { mean, min, max })
        })
        .collect()
}

/// What assertions see: each variant's figures (mean, min, max) and its unfinished runs.
fn variant_figures(
    runs: &[VariantRuns],
    comparison: &Comparison,
) -> BTreeMap<String, VariantFigures> {
    runs.iter()
        .enumerate()
        .map(|(i, variant)| {
            let figures = comparison
                .figures
                .iter()
                .filter_map(|figure| {
                    let stat = Stat {
                        mean: figure.values.get(i).copied().flatten()?,
                        min: figure.min.get(i).copied().flatten()?,
                        max: figure.max.get(i).copied().flatten()?,
                    };
                    Some((figure.name.clone(), stat))
                })
                .collect();
            let failed = variant
                .runs
                .iter()
                .filter(|run| run.state != SimulationState::Succeeded)
                .count();
            let noise = comparison
                .figures
                .iter()
                .filter_map(|figure| {
                    let noise = figure.noise.get(i).copied().flatten()?;
                    Some((figure.name.clone(), (noise.p_value, noise.beyond_noise)))
                })
                .collect();
            (
                variant.name.clone(),
                VariantFigures {
                    figures,
                    failed: u32::try_from(failed).unwrap_or(u32::MAX),
                    noise,
                    availability: availability(&succeeded(variant)),
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::{Args as _, FromArgMatches as _};
    use ksim_experiment::experiment::Experiment;

    use super::*;

    /// Nothing listens on loopback's discard port: a connection to it is refused at once.
    const NO_DRIVER: &str = "http://127.0.0.1:9";

    /// `exp.yaml` of two variants, two runs each, of `t.ktrace`, both in `dir`.
    fn experiment_in(dir: &Path) -> PathBuf {
        let file = dir.join("exp.yaml");
        std::fs::write(
            &file,
            "trace: t.ktrace\nrepeats: 2\nvariants: [{name: a}, {name: b}]\n",
        )
        .unwrap();
        std::fs::write(dir.join("t.ktrace"), b"the recording").unwrap();
        file
    }

    /// `ksim experiment run` as parsed from `argv` (after `run`).
    fn args(argv: &[&str]) -> ExperimentArgs {
        let command = ExperimentArgs::augment_args(clap::Command::new("run"));
        let matches = command
            .try_get_matches_from(std::iter::once("run").chain(argv.iter().copied()))
            .unwrap();
        ExperimentArgs::from_arg_matches(&matches).unwrap()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// `ksim experiment run -f FILE -o OUTPUT` against a driver nothing listens at: its error.
    fn run_without_driver(file: &Path, output: &Path) -> anyhow::Error {
        let argv = [
            "-f",
            file.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--driver",
            NO_DRIVER,
        ];
        runtime()
            .block_on(run(ExperimentCommand::Run(args(&argv))))
            .unwrap_err()
    }

    #[test]
    fn an_output_over_the_experiment_or_a_file_it_names_is_refused_before_any_run() {
        let dir = tempfile::tempdir().unwrap();
        let file = experiment_in(dir.path());
        let trace = dir.path().join("t.ktrace");
        // The chart through a link to the trace, and the experiment file where a run's report
        // goes.
        let output = dir.path().join("out");
        std::fs::create_dir_all(output.join("b/2")).unwrap();
        std::os::unix::fs::symlink(&trace, output.join("comparison.svg")).unwrap();
        let moved = output.join("b/2/report.json");
        let yaml = format!(
            "trace: {}\nrepeats: 2\nvariants: [{{name: b}}]\n",
            trace.display()
        );
        std::fs::write(&moved, yaml).unwrap();
        for (experiment, refused, input) in [
            (&file, output.join("comparison.svg"), &trace),
            (&moved, moved.clone(), &moved),
        ] {
            let error = run_without_driver(experiment, &output);
            assert_eq!(
                format!("{error:#}"),
                format!(
                    "the output {} is the input {}; write to another file",
                    refused.display(),
                    input.display()
                )
            );
        }
        assert_eq!(std::fs::read(&trace).unwrap(), b"the recording");
        // Anywhere else is fine.
        let (experiment, _) = plan::read(&file).unwrap();
        check_outputs(&file, &experiment, &dir.path().join("elsewhere")).unwrap();
    }

    #[test]
    fn a_driver_out_of_reach_stops_the_experiment_at_its_first_run_with_no_comparison() {
        let dir = tempfile::tempdir().unwrap();
        let file = experiment_in(dir.path());
        let output = dir.path().join("results");
        let said = format!("{:#}", run_without_driver(&file, &output));
        assert!(
            said.starts_with(&format!(
                "variant a, run 1: the experiment stops, no comparison written: cannot reach the \
                 driver at {NO_DRIVER}"
            )),
            "{said}"
        );
        assert!(!said.contains('\n'), "{said}");
        for name in COMPARISON_FILES {
            assert!(!output.join(name).exists(), "{name} written");
        }

        // No run after the first was tried.
        let specs = [
            ("a", SimulationSpec::default()),
            ("b", SimulationSpec::default()),
        ]
        .map(|(name, spec)| (name.to_owned(), spec));
        let mut out = Vec::new();
        let stopped = runtime().block_on(run_all(NO_DRIVER, &specs, 2, &output, &mut out));
        assert!(stopped.is_err());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "ksim experiment: variant a, run 1 of 2\n"
        );
    }

    /// The keys the experiment file takes, as its parser lists them for an unknown one.
    fn keys_taken(yaml: &str) -> Vec<String> {
        let error = Experiment::parse("x.yaml", yaml).unwrap_err().to_string();
        let (_, expected) = error
            .split_once("expected one of")
            .unwrap_or_else(|| panic!("{error}"));
        expected
            .split(',')
            .map(|key| key.trim().trim_matches('`').to_owned())
            .collect()
    }

    /// `--file`'s help is where a user learns the file's keys: a key added to the file and
    /// not to the help fails here.
    #[test]
    fn the_file_flags_help_names_every_key_the_file_takes() {
        let command = ExperimentArgs::augment_args(clap::Command::new("run"));
        let file = command
            .get_arguments()
            .find(|arg| arg.get_id() == "file")
            .unwrap();
        let help = file.get_help().unwrap().to_string();
        let (top, variant) = help.split_once("`variants`").unwrap();
        let top_keys = keys_taken("trace: t\nvariants: [{name: a}]\nnoSuchKey: 1\n");
        let variant_keys = keys_taken("trace: t\nvariants: [{name: a, noSuchKey: 1}]\n");
        assert!(top_keys.len() > 5 && variant_keys.len() > 5, "{top_keys:?}");
        for key in top_keys.iter().filter(|key| *key != "variants") {
            assert!(top.contains(&format!("`{key}`")), "{key} missing: {help}");
        }
        for key in &variant_keys {
            assert!(
                variant.contains(&format!("`{key}`")),
                "variant key {key}: {help}"
            );
        }
    }
}
