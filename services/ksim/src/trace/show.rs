//! `ksim trace show`: the events and objects of a trace file, filtered, and one object's
//! history as YAML diffs between its versions.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use clap::Args;
use ksim_proto::ksim::trace::v1 as pb;
use ksim_trace::Record;

use super::input::TraceInput;

#[derive(Debug, Args)]
#[command(after_long_help = "\
Examples:
  ksim trace show shop.ktrace                                 every object change, in order
  ksim trace show shop.ktrace --kind Deployment -n shop --from 10m --to 20m
  ksim trace show shop.ktrace --objects                       one line per object
  ksim trace show shop.ktrace --object Deployment/web -n shop the object's history as YAML diffs
  ksim trace show shop.ktrace --usage -n shop --name web-1    what the pod used, per container

Times are RFC 3339 (2026-01-05T10:00:00Z) or a duration from the trace's start (90s, 10m; -5m is
before it).")]
pub struct ShowArgs {
    /// The trace file (ksim or SimKube).
    pub file: PathBuf,

    /// Only this kind: Deployment, or apps/v1.Deployment (case-insensitive).
    #[arg(long)]
    pub kind: Option<String>,

    /// Only this namespace.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,

    /// Only objects of this name.
    #[arg(long)]
    pub name: Option<String>,

    /// Only events at or after this time.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub from: Option<String>,

    /// Only events before this time.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub to: Option<String>,

    /// List the matching objects (changes, first and last seen) instead of the events.
    #[arg(long, conflicts_with = "object")]
    pub objects: bool,

    /// Print the history of one object, KIND/NAME (with --namespace for a namespaced one), as
    /// unified diffs of its YAML between successive versions.
    #[arg(long, value_name = "KIND/NAME", conflicts_with_all = ["kind", "name"])]
    pub object: Option<String>,

    /// Print the recorded usage samples instead: per pod (--name) and container, CPU in
    /// millicores and memory (the working set) in MiB.
    #[arg(long, conflicts_with_all = ["kind", "objects", "object"])]
    pub usage: bool,
}

struct Filter {
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    from_ms: Option<i64>,
    to_ms: Option<i64>,
}

impl Filter {
    fn time(&self, ms: i64) -> bool {
        self.from_ms.is_none_or(|from| ms >= from) && self.to_ms.is_none_or(|to| ms < to)
    }

    fn object(&self, object: &pb::TraceObject) -> bool {
        let gvk = object.gvk.clone().unwrap_or_default();
        self.kind.as_ref().is_none_or(|kind| {
            kind.eq_ignore_ascii_case(&gvk.kind)
                || kind.eq_ignore_ascii_case(&ksim_trace::gvk::display(&gvk))
        }) && self
            .namespace
            .as_ref()
            .is_none_or(|ns| *ns == object.namespace)
            && self.name.as_ref().is_none_or(|name| *name == object.name)
    }
}

/// An RFC 3339 time, or a duration after `start_ms` (before it with a minus sign).
fn parse_time(text: &str, start_ms: Option<i64>, flag: &str) -> anyhow::Result<i64> {
    if let Some(ms) = super::parse_rfc3339_ms(text).map_err(|why| anyhow!("--{flag} {why}"))? {
        return Ok(ms);
    }
    match super::parse_signed_duration(text) {
        Some((negative, offset)) => {
            let Some(start) = start_ms else {
                bail!(
                    "--{flag} {text}: the trace has no start time to count from; give an RFC 3339 time"
                );
            };
            let offset = i64::try_from(offset.as_millis()).unwrap_or(i64::MAX);
            Ok(if negative {
                start.saturating_sub(offset)
            } else {
                start.saturating_add(offset)
            })
        }
        None => bail!(
            "--{flag} {text:?} is neither an RFC 3339 time (2026-01-05T10:00:00Z) nor a duration from the trace's start (90s, 10m, -5m)"
        ),
    }
}

fn offset(ms: i64, start_ms: Option<i64>) -> String {
    match start_ms {
        Some(start) => format!(" +{:.3}s", ms.saturating_sub(start) as f64 / 1000.0),
        None => String::new(),
    }
}

fn describe(object: &pb::TraceObject) -> (String, String) {
    let kind = object
        .gvk
        .as_ref()
        .map(ksim_trace::gvk::display)
        .unwrap_or_default();
    let name = if object.namespace.is_empty() {
        object.name.clone()
    } else {
        format!("{}/{}", object.namespace, object.name)
    };
    (kind, name)
}

pub fn run(args: ShowArgs) -> anyhow::Result<()> {
    let input = TraceInput::open(&args.file)?;
    let mut reader = input.reader()?;
    let start_ms = reader
        .header()
        .start_time
        .as_ref()
        .map(ksim_trace::time::millis);
    let (kind, name) = match &args.object {
        Some(object) => {
            let Some((kind, name)) = object.rsplit_once('/') else {
                bail!("--object {object:?}: expected KIND/NAME, as in Deployment/web");
            };
            if kind.is_empty() || name.is_empty() {
                bail!("--object {object:?}: expected KIND/NAME, as in Deployment/web");
            }
            (Some(kind.to_owned()), Some(name.to_owned()))
        }
        None => (args.kind.clone(), args.name.clone()),
    };
    let filter = Filter {
        kind,
        namespace: args.namespace.clone(),
        name,
        from_ms: args
            .from
            .as_deref()
            .map(|t| parse_time(t, start_ms, "from"))
            .transpose()?,
        to_ms: args
            .to
            .as_deref()
            .map(|t| parse_time(t, start_ms, "to"))
            .transpose()?,
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    if args.usage {
        let mut samples = 0u64;
        while let Some(record) = reader.next_record().with_context(|| input.invalid())? {
            if let Record::Usage(usage) = record
                && filter.time(usage.timestamp_ms)
                && filter
                    .namespace
                    .as_ref()
                    .is_none_or(|ns| *ns == usage.namespace)
                && filter.name.as_ref().is_none_or(|name| *name == usage.pod)
            {
                usage_lines(&usage, start_ms, samples == 0, &mut out)
                    .context("writing to stdout")?;
                samples += 1;
            }
        }
        writeln!(out, "{samples} usage samples").context("writing to stdout")?;
        return out.flush().context("writing to stdout");
    }
    let mut view: Box<dyn View> = if args.object.is_some() {
        Box::new(History::default())
    } else if args.objects {
        Box::new(Objects::default())
    } else {
        Box::new(Events::default())
    };
    let mut event_index = 0u64;
    while let Some(record) = reader.next_record().with_context(|| input.invalid())? {
        let Record::Event(event) = record else {
            continue;
        };
        let index = event_index;
        event_index += 1;
        if !filter.time(event.timestamp_ms) {
            continue;
        }
        for (op, list) in [("apply", &event.applied), ("delete", &event.deleted)] {
            for object in list.iter().filter(|o| filter.object(o)) {
                view.change(index, event.timestamp_ms, start_ms, op, object, &mut out)?;
            }
        }
    }
    view.finish(start_ms, &mut out)?;
    if args.object.is_some() && view.is_empty() {
        let object = args.object.unwrap_or_default();
        let namespace = args
            .namespace
            .map(|ns| format!(" in namespace {ns}"))
            .unwrap_or_default();
        bail!(
            "{}: no object {object}{namespace} in the trace (or in the time range)",
            args.file.display()
        );
    }
    out.flush().context("writing to stdout")
}

/// A usage sample as a line per container, under a heading before the first.
fn usage_lines(
    usage: &pb::UsageSample,
    start_ms: Option<i64>,
    heading: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if heading {
        writeln!(
            out,
            "{:<24}  {:>11}  {:>7}  {:<40}  {:<20}  {:>10}  {:>10}",
            "TIME", "OFFSET", "WINDOW", "NAMESPACE/POD", "CONTAINER", "CPU (m)", "MEM (MiB)"
        )?;
    }
    let pod = format!("{}/{}", usage.namespace, usage.pod);
    for container in &usage.containers {
        writeln!(
            out,
            "{:<24}  {:>11}  {:>6}s  {pod:<40}  {:<20}  {:>10.1}  {:>10.1}",
            super::rfc3339_ms(usage.timestamp_ms),
            offset(usage.timestamp_ms, start_ms).trim_start(),
            usage.window_ms / 1000,
            container.name,
            container.cpu_nanocores as f64 / 1e6,
            container.memory_bytes as f64 / (1024.0 * 1024.0),
        )?;
    }
    Ok(())
}

trait View {
    fn change(
        &mut self,
        event: u64,
        ms: i64,
        start_ms: Option<i64>,
        op: &str,
        object: &pb::TraceObject,
        out: &mut dyn Write,
    ) -> anyhow::Result<()>;
    fn finish(&mut self, start_ms: Option<i64>, out: &mut dyn Write) -> anyhow::Result<()>;
    fn is_empty(&self) -> bool;
}

/// One line per object change, as they come.
#[derive(Default)]
struct Events {
    lines: u64,
}

impl View for Events {
    fn change(
        &mut self,
        event: u64,
        ms: i64,
        start_ms: Option<i64>,
        op: &str,
        object: &pb::TraceObject,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        if self.lines == 0 {
            writeln!(
                out,
                "{:<6}  {:<24}  {:>11}  {:<6}  {:<28}  NAMESPACE/NAME",
                "EVENT", "TIME", "OFFSET", "OP", "KIND"
            )
            .context("writing to stdout")?;
        }
        self.lines += 1;
        let (kind, name) = describe(object);
        writeln!(
            out,
            "{event:<6}  {:<24}  {:>11}  {op:<6}  {kind:<28}  {name}",
            super::rfc3339_ms(ms),
            offset(ms, start_ms).trim_start()
        )
        .context("writing to stdout")
    }

    fn finish(&mut self, _: Option<i64>, out: &mut dyn Write) -> anyhow::Result<()> {
        writeln!(out, "{} object changes", self.lines).context("writing to stdout")
    }

    fn is_empty(&self) -> bool {
        self.lines == 0
    }
}

#[derive(Default)]
struct Seen {
    applies: u64,
    deletes: u64,
    first_ms: i64,
    last_ms: i64,
}

/// One line per distinct object (memory per object, not per event).
#[derive(Default)]
struct Objects {
    objects: BTreeMap<(String, String), Seen>,
}

impl View for Objects {
    fn change(
        &mut self,
        _: u64,
        ms: i64,
        _: Option<i64>,
        op: &str,
        object: &pb::TraceObject,
        _: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let seen = self.objects.entry(describe(object)).or_insert(Seen {
            first_ms: ms,
            last_ms: ms,
            ..Seen::default()
        });
        if op == "apply" {
            seen.applies += 1;
        } else {
            seen.deletes += 1;
        }
        seen.first_ms = seen.first_ms.min(ms);
        seen.last_ms = seen.last_ms.max(ms);
        Ok(())
    }

    fn finish(&mut self, _: Option<i64>, out: &mut dyn Write) -> anyhow::Result<()> {
        let width = self
            .objects
            .keys()
            .map(|(k, _)| k.len())
            .max()
            .unwrap_or(4)
            .max(4);
        writeln!(
            out,
            "{:<width$}  {:<40}  {:>7}  {:>7}  {:<24}  LAST",
            "KIND", "NAMESPACE/NAME", "APPLIES", "DELETES", "FIRST"
        )
        .context("writing to stdout")?;
        for ((kind, name), seen) in &self.objects {
            writeln!(
                out,
                "{kind:<width$}  {name:<40}  {:>7}  {:>7}  {:<24}  {}",
                seen.applies,
                seen.deletes,
                super::rfc3339_ms(seen.first_ms),
                super::rfc3339_ms(seen.last_ms)
            )
            .context("writing to stdout")?;
        }
        writeln!(out, "{} objects", self.objects.len()).context("writing to stdout")
    }

    fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// One object's versions as unified diffs of their YAML; keeps only the previous version.
#[derive(Default)]
struct History {
    previous: String,
    versions: u64,
}

impl View for History {
    fn change(
        &mut self,
        event: u64,
        ms: i64,
        start_ms: Option<i64>,
        op: &str,
        object: &pb::TraceObject,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let (kind, name) = describe(object);
        let when = format!(
            "event {event} at {}{}",
            super::rfc3339_ms(ms),
            offset(ms, start_ms)
        );
        if op == "delete" {
            writeln!(out, "# {when}: deleted {kind} {name}\n").context("writing to stdout")?;
            self.previous.clear();
            return Ok(());
        }
        self.versions += 1;
        let current = yaml(&object.object_json)
            .with_context(|| format!("{when}: {kind} {name} is not valid JSON"))?;
        let from = if self.previous.is_empty() {
            "(none)".to_owned()
        } else {
            format!("version {}", self.versions - 1)
        };
        writeln!(
            out,
            "# {when}: applied {kind} {name} (version {})",
            self.versions
        )
        .context("writing to stdout")?;
        let diff = similar::TextDiff::from_lines(&self.previous, &current);
        let to = format!("version {}", self.versions);
        let text = diff
            .unified_diff()
            .context_radius(3)
            .header(&from, &to)
            .to_string();
        if text.is_empty() {
            writeln!(out, "(no change)\n").context("writing to stdout")?;
        } else {
            writeln!(out, "{text}").context("writing to stdout")?;
        }
        self.previous = current;
        Ok(())
    }

    fn finish(&mut self, _: Option<i64>, _: &mut dyn Write) -> anyhow::Result<()> {
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.versions == 0 && self.previous.is_empty()
    }
}

/// The object as YAML (empty for an identity-only object).
fn yaml(json: &[u8]) -> anyhow::Result<String> {
    if json.is_empty() {
        return Ok(String::new());
    }
    let value: serde_json::Value = serde_json::from_slice(json)?;
    Ok(serde_saphyr::to_string(&value)?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc_3339_or_signed_durations_from_the_start() {
        let start_ms = super::super::parse_rfc3339_ms("2026-01-05T10:00:00Z")
            .unwrap()
            .unwrap();
        let ten_minutes = 10 * 60 * 1000;
        assert_eq!(
            parse_time("10m", Some(start_ms), "from").unwrap(),
            start_ms + ten_minutes
        );
        assert_eq!(
            parse_time("-10m", Some(start_ms), "from").unwrap(),
            start_ms - ten_minutes
        );
        let error = parse_time("1969-12-31T23:30:00Z", Some(start_ms), "from").unwrap_err();
        assert_eq!(
            error.to_string(),
            "--from 1969-12-31T23:30:00Z is before 1970-01-01T00:00:00Z; a trace holds times from 1970 to the end of 9999"
        );
        let error = parse_time("2026-13-01T00:00:00Z", Some(start_ms), "to").unwrap_err();
        assert!(error.to_string().contains("out of range"), "{error}");
        let error = parse_time("yesterday", Some(start_ms), "from").unwrap_err();
        assert!(error.to_string().contains("-5m"), "{error}");
    }
}
