//! `ksim`: the command line of the ksim cluster simulator.

mod cli;
mod compare;
mod completions;
mod demo;
#[cfg(test)]
mod docs_commands;
mod down;
mod driver;
mod env;
mod experiment;
mod files;
mod kubectl;
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
        cli::Command::Up(args) => up::run(args).await,
        cli::Command::Down => down::run().await,
        cli::Command::Run(args) => run::run(*args).await,
        cli::Command::Report { id, json, driver } => report::run(&id, &driver, json).await,
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

/// One line on stderr, every cause included, and a non-zero exit (`ksim trace validate`'s own
/// for findings).
fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("ksim: error: {error:#}");
    if error.is::<trace::FindingsRemain>() {
        return ExitCode::from(trace::FINDINGS_EXIT);
    }
    ExitCode::FAILURE
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
