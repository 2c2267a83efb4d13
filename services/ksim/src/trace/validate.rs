//! `ksim trace validate` and `ksim trace explain`: the rules of `ksim-lint` on a trace file.

use std::collections::BTreeSet;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use ksim_lint::{Options, Rule, Severity, Summary};

use super::input::TraceInput;

/// What `ksim trace validate` exits with when findings of error severity remain.
pub const FINDINGS_EXIT: u8 = 3;

#[derive(Debug, Args)]
#[command(after_long_help = "\
Rules (`ksim trace explain RULE` says why each matters and what --fix does):
  KS001 missing-reference  error    pod templates naming ServiceAccounts, ConfigMaps, Secrets or PVCs not in the trace
  KS002 absent-owner       warning  owner references to objects not in the trace
  KS003 server-fields      warning  status and server-set metadata (uid, resourceVersion, ...)
  KS004 unknown-kind       error    kinds the cluster of --kubeconfig/--context does not serve (only then)
  KS005 out-of-order       error    events out of timestamp order or outside the header's window
  KS006 invalid-value      error    replicas outside 0..2147483647, namespace names that are not DNS labels
  KS007 bad-usage          error    usage samples out of order for their pod, outside the window, or beyond any machine

Exit status:
  0  no finding of error severity (warnings may remain); with --fix, the fixed trace was written
     and validates without errors
  1  the trace could not be read or written, or the cluster could not be reached (one line)
  2  a bad command line, such as an unknown rule in --ignore
  3  findings of error severity remain")]
pub struct ValidateArgs {
    /// The trace file (ksim or SimKube).
    pub file: PathBuf,

    /// Write a corrected ksim trace to OUT (atomically) and list each change.
    #[arg(long, value_name = "OUT")]
    pub fix: Option<PathBuf>,

    /// Rules not to run, by id or name (KS003, server-fields); repeat or separate with commas.
    #[arg(long, value_name = "RULE", value_delimiter = ',', value_parser = parse_rule)]
    pub ignore: Vec<&'static Rule>,

    /// Check the trace's kinds against this cluster's discovery (KS004); without --kubeconfig
    /// or --context no cluster is contacted.
    #[command(flatten)]
    pub kube: ksim_kube::KubeArgs,
}

/// A rule id or name, for clap.
pub fn parse_rule(key: &str) -> Result<&'static Rule, String> {
    ksim_lint::find_rule(key).ok_or_else(|| {
        let known: Vec<String> = ksim_lint::RULES
            .iter()
            .map(|rule| format!("{} ({})", rule.id, rule.name))
            .collect();
        format!("unknown rule; the rules are {}", known.join(", "))
    })
}

/// Findings of error severity remain: `main` exits with [`FINDINGS_EXIT`].
#[derive(Debug)]
pub struct FindingsRemain {
    pub errors: u64,
    pub file: PathBuf,
}

impl std::fmt::Display for FindingsRemain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} finding{} of error severity",
            self.file.display(),
            self.errors,
            if self.errors == 1 { "" } else { "s" }
        )
    }
}

impl std::error::Error for FindingsRemain {}

pub async fn run(args: ValidateArgs) -> anyhow::Result<()> {
    if let Some(fixed) = &args.fix {
        crate::files::check_output_of(&fix_label(fixed), fixed, &[&args.file])?;
    }
    let input = TraceInput::open(&args.file)?;
    let mut options = Options {
        disabled: args.ignore.iter().map(|rule| rule.id).collect(),
        cluster_kinds: None,
    };
    if args.kube.kubeconfig.is_some() || args.kube.context.is_some() {
        options.cluster_kinds = Some(cluster_kinds(&args.kube).await?);
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    let summary = check(&input, options.clone(), &mut out)?;
    let Some(fixed_path) = args.fix else {
        writeln!(out, "{}", summary_line(&summary)).context("writing to stdout")?;
        out.flush().context("writing to stdout")?;
        return match summary.errors {
            0 => Ok(()),
            errors => Err(FindingsRemain {
                errors,
                file: args.file,
            }
            .into()),
        };
    };
    writeln!(out, "{}", summary_line(&summary)).context("writing to stdout")?;
    let mut changes = 0;
    let reordered = input.reordered_events();
    if reordered > 0 && options.enabled(&ksim_lint::rules::OUT_OF_ORDER) {
        changes += 1;
        writeln!(
            out,
            "fixed {}: trace: {reordered} SimKube event{} put into timestamp order",
            ksim_lint::rules::OUT_OF_ORDER,
            plural(reordered)
        )
        .context("writing to stdout")?;
    }
    changes += write_fixed(&input, &summary, &options, &fixed_path, &mut out)?;
    // What was written is checked like any input.
    let written = TraceInput::open(&fixed_path)?;
    let after = check(&written, options, &mut std::io::sink())?;
    writeln!(
        out,
        "wrote {}: {changes} change{}; it validates with {} error{} and {} warning{}",
        fixed_path.display(),
        plural(changes),
        after.errors,
        plural(after.errors),
        after.warnings,
        plural(after.warnings),
    )
    .context("writing to stdout")?;
    out.flush().context("writing to stdout")?;
    match after.errors {
        0 => Ok(()),
        errors => Err(FindingsRemain {
            errors,
            file: fixed_path,
        }
        .into()),
    }
}

fn fix_label(path: &Path) -> String {
    format!("--fix {}", path.display())
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Runs the rules over `input`, one line per finding on `out`.
fn check(input: &TraceInput, options: Options, out: &mut impl Write) -> anyhow::Result<Summary> {
    let rule = &ksim_lint::rules::OUT_OF_ORDER;
    let reordered = input.reordered_events();
    let reordered = if options.enabled(rule) { reordered } else { 0 };
    if reordered > 0 {
        let finding = ksim_lint::Finding {
            rule,
            location: ksim_lint::Location::default(),
            message: format!(
                "{reordered} SimKube event{} older than an event before {}; the conversion to \
                 ksim sorts them (stable), as --fix does",
                plural(reordered),
                if reordered == 1 { "it" } else { "them" }
            ),
        };
        writeln!(out, "{finding}").context("writing to stdout")?;
    }
    let mut written = Ok(());
    let summary = ksim_lint::lint(input.reader()?, options, &mut |finding| {
        if written.is_ok() {
            written = writeln!(out, "{finding}");
        }
    })
    .with_context(|| input.invalid())?;
    written.context("writing to stdout")?;
    let mut summary = summary;
    if reordered > 0 {
        summary.errors += 1;
        *summary.by_rule.entry(rule.id).or_default() += 1;
    }
    Ok(summary)
}

fn summary_line(summary: &Summary) -> String {
    // Usage only where there is some: most traces (SimKube's, older ksim's) have none.
    let usage = match summary.usage {
        0 => String::new(),
        n => format!(", {n} usage samples"),
    };
    let mut line = format!(
        "{} events, {} objects, {} lifecycles{usage}: {} error{}, {} warning{}",
        summary.events,
        summary.objects,
        summary.lifecycles,
        summary.errors,
        plural(summary.errors),
        summary.warnings,
        plural(summary.warnings)
    );
    if !summary.by_rule.is_empty() {
        let counts: Vec<String> = summary
            .by_rule
            .iter()
            .map(|(id, n)| format!("{id} {n}"))
            .collect();
        line.push_str(&format!(" ({})", counts.join(", ")));
    }
    line
}

/// Writes the fixed trace to a temporary file beside `path`, then renames it into place.
fn write_fixed(
    input: &TraceInput,
    summary: &Summary,
    options: &Options,
    path: &Path,
    out: &mut impl Write,
) -> anyhow::Result<u64> {
    let file = crate::files::file_beside(path)?;
    let mut count = 0u64;
    let mut written = Ok(());
    let (file, _) = ksim_lint::fix(
        input.reader()?,
        summary,
        options,
        BufWriter::new(file),
        &mut |change| {
            count += 1;
            if written.is_ok() {
                written = writeln!(out, "{change}");
            }
        },
    )
    .with_context(|| format!("writing the fixed trace {}", path.display()))?;
    written.context("writing to stdout")?;
    let file = file
        .into_inner()
        .map_err(|error| error.into_error())
        .with_context(|| format!("writing {}", path.display()))?;
    crate::files::persist(file, &fix_label(path), path)?;
    Ok(count)
}

/// The group/version/kinds the cluster serves, from its discovery API.
async fn cluster_kinds(kube: &ksim_kube::KubeArgs) -> anyhow::Result<BTreeSet<ksim_lint::Gvk>> {
    let connected = kube.connect().await.context("connecting to the cluster")?;
    let discovery = kube::Discovery::new(connected.client)
        .run()
        .await
        .with_context(|| format!("listing the kinds {} serves", connected.cluster_url))?;
    let mut kinds = BTreeSet::new();
    for group in discovery.groups() {
        for version in group.versions() {
            for (resource, _) in group.versioned_resources(version) {
                kinds.insert((resource.group, resource.version, resource.kind));
            }
        }
    }
    Ok(kinds)
}

/// `ksim trace explain RULE`.
pub fn explain(rule: &Rule) -> anyhow::Result<()> {
    let severity = match rule.severity {
        Severity::Error => "error (validate exits 3 while one remains)",
        Severity::Warning => "warning",
    };
    let text = format!(
        "{} {}: {}\nseverity: {severity}\n\n{}\n",
        rule.id, rule.name, rule.title, rule.explanation
    );
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")
}
