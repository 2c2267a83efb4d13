//! `ksim completions <SHELL>`: a completion script generated from the command definitions.

use clap::CommandFactory;
use clap_complete::Shell;

pub fn run(shell: Shell) -> anyhow::Result<()> {
    let mut command = crate::cli::Cli::command();
    clap_complete::generate(shell, &mut command, "ksim", &mut std::io::stdout());
    Ok(())
}
