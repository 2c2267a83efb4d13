//! `ksim`: the command line of the ksim cluster simulator.

mod cli;
mod demo;
mod trace;
mod up;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let _telemetry = match ksim_grpc::init_telemetry("ksim", &cli.log) {
        Ok(guard) => guard,
        Err(error) => return fail(&error.into()),
    };
    let result = match cli.command {
        cli::Command::Up => up::run().await,
        cli::Command::Demo => demo::run().await,
        cli::Command::Trace(command) => trace::run(*command).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    }
}

/// One line on stderr, every cause included, and a non-zero exit.
fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("ksim: error: {error:#}");
    ExitCode::FAILURE
}
