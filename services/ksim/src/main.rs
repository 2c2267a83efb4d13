//! `ksim`: the command line of the ksim cluster simulator.

mod cli;
mod compare;
mod completions;
mod demo;
#[cfg(test)]
mod docs_commands;
mod down;
mod driver;
mod experiment;
mod files;
mod kubectl;
mod page;
mod report;
mod run;
mod trace;
mod up;

use std::process::ExitCode;

use clap::{Parser, error::ErrorKind};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(error),
    };
    let _telemetry = match ksim_grpc::init_cli_telemetry("ksim", &cli.log.telemetry()) {
        Ok(guard) => guard,
        Err(error) => return fail(&error.into()),
    };
    let result = match cli.command {
        cli::Command::Up(options) => up::run(&options, &cli.log.telemetry()),
        cli::Command::Down => down::run().await,
        cli::Command::Run(args) => run::run(*args).await,
        cli::Command::Report {
            id,
            json,
            pod,
            owner,
            html,
            driver,
        } => {
            let show = match (&html, &pod, &owner) {
                (Some(path), _, _) => report::Show::Html(path),
                (None, Some(pod), _) => report::Show::Explained(ksim_report::PodSelector::Pod(pod)),
                (None, None, Some(owner)) => {
                    report::Show::Explained(ksim_report::PodSelector::Owner(owner))
                }
                (None, None, None) if json => report::Show::Json,
                (None, None, None) => report::Show::Summary,
            };
            report::run(&id, &driver, show).await
        }
        cli::Command::Compare(args) => compare::run(args).await,
        cli::Command::Experiment(command) => experiment::run(command).await,
        cli::Command::Demo {
            write_trace: Some(path),
            ..
        } => demo::write_trace(&path),
        cli::Command::Demo {
            speed,
            write_trace: None,
        } => demo::run(speed).await,
        cli::Command::Trace(command) => trace::run(*command).await,
        cli::Command::Completions { shell } => completions::run(shell),
        // kubectl's own exit status, not ksim's success or failure.
        cli::Command::Kubectl { args } => {
            return kubectl::run(&args).unwrap_or_else(|error| fail(&error));
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    }
}

/// One line on stderr, every cause included once, and a non-zero exit (`ksim trace
/// validate`'s own for findings).
fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("ksim: error: {}", causes(error));
    if error.is::<trace::FindingsRemain>() {
        return ExitCode::from(trace::FINDINGS_EXIT);
    }
    ExitCode::FAILURE
}

/// [`ksim_grpc::error_line`] of an anyhow error.
fn causes(error: &anyhow::Error) -> String {
    ksim_grpc::error_line(error.as_ref())
}

/// Help and version as clap prints them; a bad command line as one line, like every other
/// error, with clap's usage exit code.
fn usage_error(error: clap::Error) -> ExitCode {
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    // The message is the first paragraph (a list of missing arguments spans several lines);
    // usage and tips follow a blank line.
    let rendered = error.to_string();
    let paragraph: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let line = paragraph.join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    eprintln!("ksim: error: {line} (see `ksim --help`)");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::causes;

    /// A cause whose own message repeats its source, as `#[error("...: {0}")]` with
    /// `#[source]` does.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot write {path}: {source}")]
    struct Repeating {
        path: &'static str,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied");
        let error = anyhow::Error::new(Repeating {
            path: "/state/env.json",
            source: io(),
        })
        .context("starting the environment");
        assert_eq!(
            causes(&error),
            "starting the environment: cannot write /state/env.json: permission denied"
        );
        // A context formatted with the error it wraps.
        let wrapped = anyhow::Error::new(io()).context(format!("reading trace.ksim: {}", io()));
        assert_eq!(causes(&wrapped), "reading trace.ksim: permission denied");
        // Distinct causes are all kept, outermost first.
        let distinct = anyhow::Error::new(io())
            .context("reading trace.ksim")
            .context("ksim run");
        assert_eq!(
            causes(&distinct),
            "ksim run: reading trace.ksim: permission denied"
        );
        assert_eq!(causes(&anyhow::anyhow!("alone")), "alone");
    }
}
