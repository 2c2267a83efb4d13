//! An experiment's runs in order (each variant's repeats, variant after variant: the order a
//! local experiment runs them and a Job's completion indexes number them), and the files it
//! names, gathered into a [`Bundle`] and unpacked again where the run happens.

use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::Context;
use ksim_experiment::experiment::Experiment;

use crate::driver::DriverArgs;
use ksim_fanout::bundle::{Bundle, MAX_UNPACKED_BYTES};

/// One variant x repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Its place among the experiment's runs, from 0.
    pub index: u32,
    /// The variant's place in the file, from 0.
    pub variant: usize,
    /// Which repeat of the variant, from 1 (its report's directory).
    pub repeat: u32,
}

/// Every run of `experiment`, in order.
pub fn runs(experiment: &Experiment) -> Vec<Run> {
    let mut runs = Vec::new();
    for variant in 0..experiment.variants.len() {
        for repeat in 1..=experiment.repeats {
            let index = u32::try_from(runs.len()).unwrap_or(u32::MAX);
            runs.push(Run {
                index,
                variant,
                repeat,
            });
        }
    }
    runs
}

/// Reads and checks the experiment file.
pub fn read(file: &Path) -> anyhow::Result<(Experiment, Vec<u8>)> {
    let text =
        crate::files::read_text_bounded(file, crate::files::MAX_CONFIG_BYTES, "the experiment")?;
    let experiment = Experiment::parse(&file.display().to_string(), &text)?;
    Ok((experiment, text.into_bytes()))
}

/// Every file the experiment names, as written, checked the way a local run checks them.
pub fn named_files(experiment: &Experiment) -> anyhow::Result<BTreeSet<String>> {
    let named = RefCell::new(BTreeSet::new());
    let record = |written: &str| {
        named.borrow_mut().insert(written.to_owned());
        PathBuf::from(written)
    };
    for variant in &experiment.variants {
        super::run_args(experiment, variant, &record, &DriverArgs { url: None })
            .with_context(|| format!("variant {}", variant.name))?;
        super::karpenter::files(experiment, variant, &record);
    }
    Ok(named.into_inner())
}

/// The experiment file and every file it names, read beside it.
pub fn bundle(file: &Path) -> anyhow::Result<(Experiment, Bundle)> {
    let (experiment, bytes) = read(file)?;
    let base = file.parent().unwrap_or(Path::new("."));
    let mut files = BTreeMap::new();
    let mut total = bytes.len();
    for written in named_files(&experiment)? {
        let path = base.join(&written);
        let content =
            crate::files::read_bounded(&path, MAX_UNPACKED_BYTES, "a file the experiment names")
                .with_context(|| format!("{written:?}, named by {}", file.display()))?;
        total += content.len();
        if total > MAX_UNPACKED_BYTES {
            anyhow::bail!(
                "{}: the experiment and the files it names pass {} MiB; import the trace into \
                 the tracer store instead",
                file.display(),
                MAX_UNPACKED_BYTES >> 20
            );
        }
        files.insert(written, content);
    }
    let name = file.file_name().map_or_else(
        || "experiment.yaml".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok((
        experiment,
        Bundle {
            name,
            experiment: bytes,
            files,
        },
    ))
}

/// A bundle's files written under `dir` (each under a name of ksim's, never one from the
/// bundle), and the experiment parsed, with where each named file now is.
pub fn unpack(
    bundle: &Bundle,
    dir: &Path,
) -> anyhow::Result<(Experiment, BTreeMap<String, PathBuf>)> {
    let text = std::str::from_utf8(&bundle.experiment)
        .with_context(|| format!("the bundled experiment {} is not UTF-8", bundle.name))?;
    let experiment = Experiment::parse(&bundle.name, text)?;
    let mut paths = BTreeMap::new();
    for (n, (written, content)) in bundle.files.iter().enumerate() {
        let path = dir.join(format!("file-{n}"));
        std::fs::write(&path, content).with_context(|| format!("writing {}", path.display()))?;
        paths.insert(written.clone(), path);
    }
    let missing: Vec<String> = named_files(&experiment)?
        .into_iter()
        .filter(|written| !paths.contains_key(written))
        .collect();
    if !missing.is_empty() {
        anyhow::bail!(
            "the bundle lacks files its experiment names: {}",
            missing.join(", ")
        );
    }
    Ok((experiment, paths))
}

/// What the sizing rule reads from an experiment: the most nodes a run may simulate (the
/// recorded peak, or its groups' largest sizes where they are larger) and the events a minute
/// of wall time its fastest variant replays.
pub fn load(experiment: &Experiment, bundle: &Bundle) -> anyhow::Result<(u32, u32)> {
    let trace = bundle
        .files
        .get(&experiment.trace)
        .with_context(|| format!("the bundle lacks the trace {}", experiment.trace))?;
    let inspection = crate::trace::inspect::inspect_bytes(trace, &experiment.trace)?;
    let mut nodes = inspection.peak_ready_nodes;
    let mut speed = 0.0_f64;
    for variant in &experiment.variants {
        // The groups as a run takes them (paths are not read here).
        let run = super::run_args(
            experiment,
            variant,
            &|written: &str| PathBuf::from(written),
            &DriverArgs { url: None },
        )?;
        speed = speed.max(run.speed);
        let fixed: u64 = run
            .node_groups
            .iter()
            .map(|group| u64::try_from(group.count).unwrap_or(0))
            .sum();
        let scaled: u64 = run
            .autoscaler_groups
            .iter()
            .map(|group| u64::try_from(group.max).unwrap_or(0))
            .sum();
        nodes = nodes.max(fixed + scaled);
    }
    let span_minutes = match (inspection.first_event_ms, inspection.last_event_ms) {
        (Some(first), Some(last)) if last > first => (last - first) as f64 / 60_000.0,
        _ => 1.0,
    };
    let per_minute = inspection.events as f64 / span_minutes.max(1.0) * speed.max(1.0);
    let clamp = |value: f64| value.clamp(0.0, f64::from(u32::MAX)) as u32;
    Ok((
        u32::try_from(nodes).unwrap_or(u32::MAX),
        clamp(per_minute.ceil()),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FILE: &str = "
trace: ../traces/demo.ktrace
repeats: 2
autoscalerGroups: ['m5=m5.yaml:0:10:1']
variants:
- name: base
- name: packed
  schedulerConfig: packed.yaml
  nodeGroups: ['fixed=fixed.yaml:2']
  provisioning: published
";

    #[test]
    fn runs_number_each_variants_repeats_in_turn() {
        let experiment = Experiment::parse("x.yaml", FILE).unwrap();
        let runs: Vec<(u32, usize, u32)> = runs(&experiment)
            .iter()
            .map(|run| (run.index, run.variant, run.repeat))
            .collect();
        assert_eq!(runs, [(0, 0, 1), (1, 0, 2), (2, 1, 1), (3, 1, 2)]);
    }

    #[test]
    fn the_named_files_are_every_path_as_written_and_not_a_builtin_model() {
        let experiment = Experiment::parse("x.yaml", FILE).unwrap();
        let named: Vec<String> = named_files(&experiment).unwrap().into_iter().collect();
        assert_eq!(
            named,
            [
                "../traces/demo.ktrace",
                "fixed.yaml",
                "m5.yaml",
                "packed.yaml"
            ]
        );
    }

    #[test]
    fn a_karpenter_variant_names_the_instance_types_and_their_prices() {
        let file = "
trace: demo.ktrace
instanceTypes: [types/m5.yaml, types/c5.yaml]
providerConfig: prices.yaml
variants:
- name: karpenter
  nodePools: [general.yaml]
- name: dearer
  nodePools: [general.yaml]
  providerConfig: dearer.yaml
";
        let experiment = Experiment::parse("x.yaml", file).unwrap();
        let named: Vec<String> = named_files(&experiment).unwrap().into_iter().collect();
        assert_eq!(
            named,
            [
                "dearer.yaml",
                "demo.ktrace",
                "general.yaml",
                "prices.yaml",
                "types/c5.yaml",
                "types/m5.yaml"
            ]
        );
    }

    #[test]
    fn a_bundle_unpacks_under_ksims_names_and_refuses_one_missing_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("exp");
        std::fs::create_dir_all(source.join("../traces")).unwrap();
        std::fs::write(dir.path().join("traces/demo.ktrace"), b"trace bytes").unwrap();
        for file in ["fixed.yaml", "m5.yaml", "packed.yaml"] {
            std::fs::write(source.join(file), file.as_bytes()).unwrap();
        }
        std::fs::write(source.join("day.yaml"), FILE).unwrap();
        let (_, bundle) = bundle(&source.join("day.yaml")).unwrap();
        assert_eq!(bundle.name, "day.yaml");

        let target = dir.path().join("unpacked");
        std::fs::create_dir(&target).unwrap();
        let (experiment, paths) = unpack(&bundle, &target).unwrap();
        assert_eq!(experiment.variants.len(), 2);
        let trace = &paths["../traces/demo.ktrace"];
        assert!(trace.starts_with(&target), "{}", trace.display());
        assert_eq!(std::fs::read(trace).unwrap(), b"trace bytes");

        let mut lacking = bundle.clone();
        lacking.files.remove("m5.yaml");
        let error = unpack(&lacking, &target).unwrap_err().to_string();
        assert_eq!(
            error,
            "the bundle lacks files its experiment names: m5.yaml"
        );
    }
}
