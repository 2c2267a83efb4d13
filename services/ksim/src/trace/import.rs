//! `ksim trace import`: a trace file (ksim or SimKube) uploaded into a tracer store.

use std::{
    io::{Read, Write},
    path::PathBuf,
};

use anyhow::Context;
use clap::{Args, ValueEnum};
use ksim_proto::ksim::trace::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{ServerArgs, connect, export::status_error, progress};

const CHUNK: usize = 1 << 20;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Auto,
    Ksim,
    Simkube,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The trace file.
    file: PathBuf,
    /// Name shown for the imported trace; default: the file name.
    #[arg(long)]
    name: Option<String>,
    /// Format of the file.
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    format: Format,
}

pub async fn run(args: ImportArgs) -> anyhow::Result<()> {
    let mut file = std::fs::File::open(&args.file)
        .with_context(|| format!("opening {}", args.file.display()))?;
    let metadata = file
        .metadata()
        .with_context(|| format!("reading {}", args.file.display()))?;
    // Refused here, by name, rather than after a device or a pipe streamed the tracer's whole
    // import limit into it.
    anyhow::ensure!(
        metadata.is_file(),
        "{}: not a regular file; ksim imports regular files only",
        args.file.display()
    );
    anyhow::ensure!(
        metadata.len() <= crate::files::MAX_WHOLE_TRACE_BYTES as u64,
        "{}: {} bytes is over the {} limit for an import",
        args.file.display(),
        metadata.len(),
        ksim_grpc::files::describe_bytes(crate::files::MAX_WHOLE_TRACE_BYTES)
    );
    let size = Some(metadata.len());
    let display_name = args.name.unwrap_or_else(|| {
        args.file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let format = match args.format {
        Format::Auto => pb::TraceFormat::Unspecified,
        Format::Ksim => pb::TraceFormat::Ksim,
        Format::Simkube => pb::TraceFormat::SimkubeV2,
    };
    let mut client = connect(&args.server).await?;
    let bar = progress::bytes(size, "importing");
    let (sender, receiver) = mpsc::channel(4);
    let reader_bar = bar.clone();
    let path = args.file.clone();
    let reading = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let mut first = true;
        loop {
            let mut data = vec![0_u8; CHUNK];
            let n = file
                .read(&mut data)
                .with_context(|| format!("reading {}", path.display()))?;
            if n == 0 && !first {
                return Ok(());
            }
            data.truncate(n);
            reader_bar.inc(n as u64);
            let message = pb::ImportRequest {
                data,
                format: if first { format.into() } else { 0 },
                display_name: if first {
                    display_name.clone()
                } else {
                    String::new()
                },
            };
            first = false;
            if sender.blocking_send(message).is_err() || n == 0 {
                return Ok(()); // the server answered early (an error), or the file was empty
            }
        }
    });
    let response = client.import(ReceiverStream::new(receiver)).await;
    bar.finish_and_clear();
    reading.await.context("reading the trace")??;
    let response = response
        .map_err(status_error)
        .with_context(|| format!("importing {}", args.file.display()))?
        .into_inner();
    let summary = response.summary.unwrap_or_default();
    // The id alone on stdout, for scripts: `id=$(ksim trace import f.ktrace)`.
    writeln!(std::io::stdout(), "{}", response.trace_id).context("writing to stdout")?;
    eprintln!(
        "imported {} bytes as trace {}: {} events, {} object changes (applies and deletes), {} pod lifecycles",
        response.bytes_received,
        response.trace_id,
        summary.events,
        summary.objects,
        summary.lifecycles
    );
    Ok(())
}
