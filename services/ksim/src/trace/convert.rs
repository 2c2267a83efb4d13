//! `ksim trace convert`: a SimKube trace, or Alibaba's GPU cluster trace v2023 (`--from
//! alibaba-gpu-v2023`: its node list and pod list), rewritten as a ksim trace file.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use clap::{Args, ValueEnum};
use ksim_trace::alibaba;

/// The largest CSV file read: Alibaba's pod list is 0.6 MB; a hundred times that is not this
/// data set, and the conversion holds the files and their pods in memory.
const MAX_CSV_BYTES: usize = 64 << 20;

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The SimKube trace to read; with --from, the ksim trace file to write.
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    /// The ksim trace file to write (SimKube form only).
    #[arg(
        value_name = "OUTPUT",
        required_unless_present = "from",
        conflicts_with = "from"
    )]
    pub output: Option<PathBuf>,
    /// Convert another cluster trace than SimKube's: alibaba-gpu-v2023 is Alibaba's GPU cluster
    /// trace v2023, given as --nodes and --pods; the single path is then the output.
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        requires = "nodes",
        requires = "pods"
    )]
    pub from: Option<Source>,
    /// The node list (openb_node_list_all_node.csv).
    #[arg(long, value_name = "NODES.csv", requires = "from")]
    pub nodes: Option<PathBuf>,
    /// The pod list (openb_pod_list_default.csv, or another openb_pod_list_*.csv).
    #[arg(long, value_name = "PODS.csv", requires = "from")]
    pub pods: Option<PathBuf>,
    /// Also write each node group's skeleton as DIR/NAME.yaml and print the --node-group flags
    /// `ksim run` takes to replay on the recorded nodes.
    #[arg(long, value_name = "DIR", requires = "from")]
    pub node_groups: Option<PathBuf>,
    /// A pod asking for a share of one GPU: given a whole GPU and annotated
    /// ksim.io/gpu-milli (whole), or an error naming its line (refuse); or GPUs by DRA (dra):
    /// every GPU pod claims its GPUs from a ResourceClaimTemplate (a share exactly, by
    /// consumable capacity), written with the DeviceClass gpu.ksim.io at the trace's start, and
    /// each GPU group's skeleton gives its GPUs as a ResourceSlice after the Node
    /// [default: whole]
    #[arg(long, value_enum, value_name = "POLICY", requires = "from")]
    pub gpu_shares: Option<Shares>,
    /// The namespace of the pods [default: alibaba]
    #[arg(long, value_name = "NAME", requires = "from")]
    pub namespace: Option<String>,
    /// The trace's time 0, RFC 3339: the CSV files give seconds from it
    /// [default: 2023-01-01T00:00:00Z]
    #[arg(long, value_name = "TIME", requires = "from")]
    pub start: Option<String>,
}

/// A cluster trace `--from` converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Source {
    /// Alibaba's GPU cluster trace v2023 (cluster-trace-gpu-v2023).
    #[value(name = "alibaba-gpu-v2023")]
    AlibabaGpuV2023,
}

/// `--gpu-shares`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shares {
    /// One whole GPU, annotated ksim.io/gpu-milli with the share asked for.
    Whole,
    /// An error naming the pod's line.
    Refuse,
    /// GPUs by DRA: claims from ResourceClaimTemplates, a share exact; ResourceSlices in the
    /// skeletons.
    Dra,
}

pub fn run(args: ConvertArgs) -> anyhow::Result<()> {
    match (args.from, &args.output) {
        (Some(Source::AlibabaGpuV2023), _) => alibaba_gpu(&args, &mut std::io::stdout().lock()),
        (None, Some(output)) => simkube(&args.input, output),
        // clap requires one or the other.
        (None, None) => bail!("give the output: ksim trace convert INPUT OUTPUT"),
    }
}

fn simkube(input: &Path, output: &Path) -> anyhow::Result<()> {
    let label = output.display().to_string();
    crate::files::check_output_of(&label, output, &[input])?;
    let bytes = super::input::Opened::open(input)?.read_whole()?;
    let file = crate::files::file_beside(output)?;
    let created_by = format!("ksim {}", env!("CARGO_PKG_VERSION"));
    let (file, conversion) = ksim_trace::simkube::convert(&bytes, file, &created_by)
        .with_context(|| format!("{} is not a convertible SimKube trace", input.display()))?;
    crate::files::persist(file, &label, output)?;
    eprintln!(
        "wrote {}: {} events, {} object changes (applies and deletes), {} pod lifecycles ({} empty SimKube lifecycles skipped)",
        output.display(),
        conversion.events,
        conversion.objects,
        conversion.lifecycles,
        conversion.skipped_lifecycles
    );
    Ok(())
}

/// `--from alibaba-gpu-v2023`: the trace to `args.input`, the skeletons to `--node-groups`,
/// whose `--node-group` flags go to `out`. Every output is checked before anything is written.
fn alibaba_gpu(args: &ConvertArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let output = &args.input;
    let (Some(nodes), Some(pods)) = (&args.nodes, &args.pods) else {
        bail!("--from alibaba-gpu-v2023 needs --nodes NODES.csv and --pods PODS.csv");
    };
    let label = output.display().to_string();
    crate::files::check_output_of(&label, output, &[nodes.as_path(), pods.as_path()])?;
    let options = alibaba::Options {
        namespace: args
            .namespace
            .clone()
            .unwrap_or_else(|| alibaba::DEFAULT_NAMESPACE.to_owned()),
        start_ms: start_ms(args.start.as_deref())?,
        created_by: format!("ksim {}", env!("CARGO_PKG_VERSION")),
        create_time_ms: ksim_trace::time::now_ms(),
    };
    let shares = match args.gpu_shares {
        None | Some(Shares::Whole) => alibaba::GpuShares::Whole,
        Some(Shares::Refuse) => alibaba::GpuShares::Refuse,
        Some(Shares::Dra) => alibaba::GpuShares::Dra,
    };
    let nodes_text = crate::files::read_text_bounded(nodes, MAX_CSV_BYTES, "node list")?;
    let pods_text = crate::files::read_text_bounded(pods, MAX_CSV_BYTES, "pod list")?;
    let (nodes_name, pods_name) = (nodes.display().to_string(), pods.display().to_string());
    let recording = alibaba::read(
        alibaba::Csv {
            name: &nodes_name,
            text: &nodes_text,
        },
        alibaba::Csv {
            name: &pods_name,
            text: &pods_text,
        },
        shares,
    )?;

    let skeletons = match &args.node_groups {
        Some(dir) => {
            let inputs = [nodes.as_path(), pods.as_path(), output.as_path()];
            skeleton_paths(dir, &recording.groups, &inputs)?
        }
        None => Vec::new(),
    };
    let file = crate::files::file_beside(output)?;
    let (file, trailer) = recording.write(file, &options)?;
    crate::files::persist(file, &label, output)?;
    if let Some(dir) = &args.node_groups {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for (path, group) in &skeletons {
        crate::files::write_whole(
            &path.display().to_string(),
            path,
            group.skeleton_yaml_for(recording.gpu_shares()).as_bytes(),
        )?;
    }

    eprintln!("{}", summary(output, &recording.summary(), &trailer));
    if let Some(dir) = &args.node_groups {
        eprintln!(
            "wrote {} node skeletons to {}; replay on the recorded nodes with `ksim run {}` and:",
            skeletons.len(),
            dir.display(),
            output.display()
        );
        let gpu_groups = skeletons.iter().filter(|(_, g)| g.shape.gpus > 0).count();
        if recording.gpu_shares() == alibaba::GpuShares::Dra && gpu_groups > 0 {
            // externalgrpc's node template carries no ResourceSlice (docs/compatibility.md).
            eprintln!(
                "{gpu_groups} of them give their GPUs as a ResourceSlice: as an \
                 --autoscaler-group, cluster-autoscaler grows such a group only from a node of \
                 its own, so give it a minimum of one"
            );
        }
    }
    for (path, group) in &skeletons {
        writeln!(
            out,
            "--node-group {}={}:{}",
            group.name,
            path.display(),
            group.nodes
        )
        .context("writing to stdout")?;
    }
    Ok(())
}

/// `DIR/NAME.yaml` of each group, checked as outputs: a directory there or none, and in it
/// regular files or new paths, never a symlink, never one of `inputs`.
fn skeleton_paths<'a>(
    dir: &Path,
    groups: &'a [alibaba::NodeGroup],
    inputs: &[&Path],
) -> anyhow::Result<Vec<(PathBuf, &'a alibaba::NodeGroup)>> {
    if let Ok(metadata) = std::fs::metadata(dir)
        && !metadata.is_dir()
    {
        bail!("--node-groups {} is not a directory", dir.display());
    }
    groups
        .iter()
        .map(|group| {
            let path = dir.join(format!("{}.yaml", group.name));
            let label = format!("--node-groups {}", path.display());
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                bail!("{label} is a symlink: skeletons are written as regular files only");
            }
            crate::files::check_output_of(&label, &path, inputs)?;
            Ok((path, group))
        })
        .collect()
}

fn start_ms(text: Option<&str>) -> anyhow::Result<i64> {
    let Some(text) = text else {
        return Ok(alibaba::DEFAULT_START_MS);
    };
    match super::parse_rfc3339_ms(text).map_err(|why| anyhow!("--start {why}"))? {
        Some(ms) => Ok(ms),
        None => bail!("--start {text:?} is not an RFC 3339 time (2023-01-01T00:00:00Z)"),
    }
}

/// The conversion in one paragraph.
fn summary(
    output: &Path,
    summary: &alibaba::Summary,
    trailer: &ksim_trace::pb::TraceTrailer,
) -> String {
    let shares = match summary.gpu_shares {
        alibaba::GpuShares::Dra => format!(
            "a share of one GPU claimed exactly), {} of them never scheduled; GPUs by DRA: {} \
             pods claim theirs through {} ResourceClaimTemplates, written with the DeviceClass \
             {} at the start",
            summary.never_scheduled,
            summary.claim_pods,
            summary.claim_templates,
            alibaba::GPU_DRIVER,
        ),
        alibaba::GpuShares::Whole | alibaba::GpuShares::Refuse => format!(
            "a share of one GPU given a whole one and annotated ksim.io/gpu-milli), {} of them \
             never scheduled",
            summary.never_scheduled
        ),
    };
    format!(
        "wrote {}: {} pods ({} asking for no GPU, {} for whole GPUs, {} for {shares}; {} nodes \
         ({} with GPUs, {} GPUs in all) in {} node groups, all Ready throughout; {} events, {} \
         cluster samples and {} pod lifecycles of recorded state",
        output.display(),
        summary.pods,
        summary.cpu_pods,
        summary.whole_gpu_pods,
        summary.shared_gpu_pods,
        summary.nodes,
        summary.gpu_nodes,
        summary.gpus,
        summary.groups,
        trailer.event_count,
        trailer.sample_count,
        trailer.lifecycle_count,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::ffi::OsStr;

    use clap::Parser;

    use super::*;
    use crate::trace::TraceCommand;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: TraceCommand,
    }

    fn parse(args: &[&OsStr]) -> Result<ConvertArgs, clap::Error> {
        let argv = [OsStr::new("trace"), OsStr::new("convert")]
            .into_iter()
            .chain(args.iter().copied());
        match Cli::try_parse_from(argv)?.command {
            TraceCommand::Convert(args) => Ok(args),
            _ => panic!("not convert"),
        }
    }

    /// The shipped pair converted with `extra` flags into `dir` (the trace `alibaba.ktrace`,
    /// the skeletons in `groups/`): the arguments, the trace and the flags printed.
    fn convert_shipped(dir: &Path, extra: &[&str]) -> (ConvertArgs, ksim_trace::Trace, String) {
        let data = shipped();
        let output = dir.join("alibaba.ktrace");
        let groups = dir.join("groups");
        let (nodes, pods) = (
            data.join("openb_node_list_all_node.csv"),
            data.join("openb_pod_list_default.csv"),
        );
        let mut argv: Vec<&OsStr> = vec![
            "--from".as_ref(),
            "alibaba-gpu-v2023".as_ref(),
            "--nodes".as_ref(),
            nodes.as_os_str(),
            "--pods".as_ref(),
            pods.as_os_str(),
            "--node-groups".as_ref(),
            groups.as_os_str(),
        ];
        argv.extend(extra.iter().map(OsStr::new));
        argv.push(output.as_os_str());
        let args = parse(&argv).unwrap();
        let mut out = Vec::new();
        alibaba_gpu(&args, &mut out).unwrap();
        let trace = ksim_trace::read_trace(&std::fs::read(&output).unwrap()).unwrap();
        (args, trace, String::from_utf8(out).unwrap())
    }

    /// Each `--node-group` flag printed, its group and the skeleton it names, read as a run
    /// reads it.
    fn groups_written(
        flags: &str,
    ) -> Vec<(
        &str,
        crate::run::groups::NodeGroupArg,
        ksim_nodes::skeleton::NodeSkeleton,
    )> {
        flags
            .lines()
            .map(|line| {
                let value = line.strip_prefix("--node-group ").expect(line);
                let group = crate::run::groups::parse_node_group(value).unwrap();
                let yaml = std::fs::read_to_string(&group.skeleton).unwrap();
                let skeleton = ksim_nodes::skeleton::NodeSkeleton::from_yaml(&yaml).unwrap();
                (line, group, skeleton)
            })
            .collect()
    }

    fn shipped() -> PathBuf {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/third_party/alibaba-gpu-v2023");
        assert!(
            dir.join("openb_pod_list_default.csv").is_file(),
            "the Alibaba GPU trace v2023 is missing: expected {} to hold \
             cluster-trace-gpu-v2023/csv/openb_*.csv of github.com/alibaba/clusterdata",
            dir.display()
        );
        dir
    }

    #[test]
    fn the_two_forms_do_not_mix() {
        let simkube = parse(&["in.sktrace".as_ref(), "out.ktrace".as_ref()]).unwrap();
        assert_eq!(simkube.from, None);
        assert_eq!(simkube.output.as_deref(), Some(Path::new("out.ktrace")));
        let from = [
            "--from",
            "alibaba-gpu-v2023",
            "--nodes",
            "n.csv",
            "--pods",
            "p.csv",
        ];
        let mut args: Vec<&OsStr> = from.iter().map(OsStr::new).collect();
        args.push("out.ktrace".as_ref());
        let alibaba = parse(&args).unwrap();
        assert_eq!(alibaba.from, Some(Source::AlibabaGpuV2023));
        assert_eq!(alibaba.input, Path::new("out.ktrace"));

        let refused = |args: &[&str]| {
            let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
            parse(&args).expect_err("refused").to_string()
        };
        let both = refused(&[
            "--from",
            "alibaba-gpu-v2023",
            "--nodes",
            "n.csv",
            "--pods",
            "p.csv",
            "in.sktrace",
            "out.ktrace",
        ]);
        assert!(both.contains("cannot be used with"), "{both}");
        let no_from = refused(&["--nodes", "n.csv", "in.sktrace", "out.ktrace"]);
        assert!(no_from.contains("--from"), "{no_from}");
        let no_pods = refused(&[
            "--from",
            "alibaba-gpu-v2023",
            "--nodes",
            "n.csv",
            "out.ktrace",
        ]);
        assert!(no_pods.contains("--pods"), "{no_pods}");
        let shares = refused(&["in.sktrace", "out.ktrace", "--gpu-shares", "refuse"]);
        assert!(shares.contains("--from"), "{shares}");
        args.splice(0..0, ["--gpu-shares".as_ref(), "dra".as_ref()]);
        assert_eq!(parse(&args).unwrap().gpu_shares, Some(Shares::Dra));
        let policy = refused(&[
            "--from",
            "alibaba-gpu-v2023",
            "--nodes",
            "n.csv",
            "--pods",
            "p.csv",
            "--gpu-shares",
            "mig",
            "out.ktrace",
        ]);
        assert!(policy.contains("whole, refuse, dra"), "{policy}");
        let unknown = refused(&["--from", "borg", "--nodes", "n", "--pods", "p", "out"]);
        assert!(unknown.contains("alibaba-gpu-v2023"), "{unknown}");
        let no_output = refused(&["in.sktrace"]);
        assert!(no_output.contains("OUTPUT"), "{no_output}");
    }

    #[test]
    fn the_shipped_trace_converts_with_its_node_groups() {
        let dir = tempfile::tempdir().unwrap();
        let groups = dir.path().join("groups");
        let (args, trace, flags) = convert_shipped(dir.path(), &[]);
        assert_eq!(trace.nodes.len(), 1523);
        let pods_applied: usize = trace.events.iter().map(|e| e.applied.len()).sum();
        assert_eq!(pods_applied, 8152);

        // One flag per group, each naming a skeleton the run reads, the counts adding up.
        let mut total = 0;
        for (line, group, skeleton) in groups_written(&flags) {
            let gpus = skeleton.capacity.get("nvidia.com/gpu");
            assert_eq!(gpus.is_some(), group.name.starts_with("gpu-"), "{line}");
            assert_eq!(skeleton.taints.len(), usize::from(gpus.is_some()), "{line}");
            total += group.count;
        }
        assert_eq!(total, 1523);
        assert_eq!(flags.lines().count(), 27);
        assert!(flags.contains("--node-group gpu-g2-8x-96c="), "{flags}");
        assert!(flags.contains("gpu-g2-8x-96c.yaml:549"), "{flags}");

        // A symlink where a skeleton goes is refused before anything is written.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "kept").unwrap();
        let link = groups.join("gpu-g2-8x-96c.yaml");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let again = dir.path().join("again.ktrace");
        let args = ConvertArgs {
            input: again.clone(),
            ..args
        };
        let error = alibaba_gpu(&args, &mut Vec::new()).unwrap_err().to_string();
        assert!(error.contains("is a symlink"), "{error}");
        assert!(!again.exists());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "kept");
    }

    #[test]
    fn the_shipped_trace_converts_with_dra_claims_and_resource_slices() {
        let dir = tempfile::tempdir().unwrap();
        let (_, trace, flags) = convert_shipped(dir.path(), &["--gpu-shares", "dra"]);
        let first = &trace.events[0];
        assert_eq!(first.applied[0].name, alibaba::GPU_DRIVER);
        let templates = first.applied.len() - 1;
        let claims = trace
            .events
            .iter()
            .flat_map(|e| &e.applied)
            .filter(|o| {
                let pod: serde_json::Value = serde_json::from_slice(&o.object_json).unwrap();
                pod["kind"] == "Pod" && pod["spec"].get("resourceClaims").is_some()
            })
            .count();

        // Every skeleton reads; a GPU group's with one device per GPU and no nvidia.com/gpu.
        let mut gpu_groups = 0;
        for (line, group, skeleton) in groups_written(&flags) {
            assert!(!skeleton.capacity.contains_key("nvidia.com/gpu"), "{line}");
            match &skeleton.devices {
                Some(devices) => {
                    gpu_groups += 1;
                    let gpus: usize = group
                        .name
                        .split('-')
                        .find_map(|part| part.strip_suffix('x').and_then(|n| n.parse().ok()))
                        .expect(line);
                    assert_eq!(devices.devices.len(), gpus, "{line}");
                    assert_eq!(skeleton.taints.len(), 1, "{line}");
                }
                None => assert!(group.name.starts_with("cpu-"), "{line}"),
            }
        }
        eprintln!(
            "shipped pair, --gpu-shares dra: {claims} pods with claims, {templates} templates, \
             {gpu_groups} GPU groups of {} written",
            flags.lines().count()
        );
        assert_eq!((claims, templates, gpu_groups), (7064, 24, 15));
        assert_eq!(flags.lines().count(), 27);
    }

    #[test]
    fn the_summary_says_what_was_converted() {
        let summary = alibaba::Summary {
            pods: 10,
            nodes: 3,
            gpu_nodes: 2,
            gpus: 9,
            groups: 2,
            cpu_pods: 4,
            whole_gpu_pods: 5,
            shared_gpu_pods: 1,
            never_scheduled: 2,
            ..alibaba::Summary::default()
        };
        let trailer = ksim_trace::pb::TraceTrailer {
            event_count: 7,
            sample_count: 6,
            lifecycle_count: 8,
            ..Default::default()
        };
        assert_eq!(
            super::summary(Path::new("a.ktrace"), &summary, &trailer),
            "wrote a.ktrace: 10 pods (4 asking for no GPU, 5 for whole GPUs, 1 for a share of one \
             GPU given a whole one and annotated ksim.io/gpu-milli), 2 of them never scheduled; 3 \
             nodes (2 with GPUs, 9 GPUs in all) in 2 node groups, all Ready throughout; 7 events, \
             6 cluster samples and 8 pod lifecycles of recorded state"
        );
        let dra = alibaba::Summary {
            gpu_shares: alibaba::GpuShares::Dra,
            claim_pods: 6,
            claim_templates: 3,
            ..summary
        };
        assert_eq!(
            super::summary(Path::new("a.ktrace"), &dra, &trailer),
            "wrote a.ktrace: 10 pods (4 asking for no GPU, 5 for whole GPUs, 1 for a share of one \
             GPU claimed exactly), 2 of them never scheduled; GPUs by DRA: 6 pods claim theirs \
             through 3 ResourceClaimTemplates, written with the DeviceClass gpu.ksim.io at the \
             start; 3 nodes (2 with GPUs, 9 GPUs in all) in 2 node groups, all Ready throughout; \
             7 events, 6 cluster samples and 8 pod lifecycles of recorded state"
        );
        assert_eq!(start_ms(None).unwrap(), alibaba::DEFAULT_START_MS);
        assert_eq!(
            start_ms(Some("2023-01-01T00:00:00Z")).unwrap(),
            alibaba::DEFAULT_START_MS
        );
        assert!(
            start_ms(Some("monday"))
                .unwrap_err()
                .to_string()
                .contains("--start")
        );
    }
}
