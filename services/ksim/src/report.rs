//! `ksim report <ID>`: a simulation's report, summarised or as JSON, or why its explained pods
//! went where they did.

use std::io::Write;
use std::path::Path;

use ksim_proto::ksim::driver::v1::{GetSimulationRequest, SimulationState};

use crate::driver::{DriverArgs, connect, get_report};

/// What `ksim report` prints.
#[derive(Debug, Clone, Copy)]
pub enum Show<'a> {
    Summary,
    Json,
    Explained(ksim_report::PodSelector<'a>),
    /// The page, written to this file.
    Html(&'a Path),
}

pub async fn run(id: &str, driver: &DriverArgs, show: Show<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if let Show::Html(path) = show {
        // Refused before anything is read: never written over the report it is made from.
        let input = crate::compare::report_file(id);
        let inputs: Vec<&Path> = input.iter().map(|file| file.as_path()).collect();
        crate::files::check_output_of(&format!("--html {}", path.display()), path, &inputs)?;
        let report = crate::compare::load(id, driver).await?;
        crate::page::write_html(&report, path, &inputs)?;
        writeln!(out, "{}", path.display())?;
        return Ok(());
    }
    if let Show::Explained(selector) = show {
        // A report directory (the driver may be gone, as after `ksim demo`) or a simulation id.
        let report = crate::compare::load(id, driver).await?;
        let pods = ksim_report::select(&report, selector)?;
        write!(out, "{}", ksim_report::explanation_text(&pods))?;
        return Ok(());
    }
    let mut client = connect(&driver.resolve()?).await?;
    let report = get_report(&mut client, id).await?;
    if matches!(show, Show::Json) {
        // report.json's form, not the proto's canonical JSON.
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        // Its header says how the run ended; a driver that cannot say leaves it to the report.
        let state = client
            .get_simulation(GetSimulationRequest { id: id.to_owned() })
            .await
            .ok()
            .and_then(|answer| answer.into_inner().simulation)
            .map_or(SimulationState::Unspecified, |simulation| {
                simulation.state()
            });
        write!(out, "{}", ksim_report::summary_ended(&report, state))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_never_written_over_the_report_it_is_made_from() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join(ksim_report::JSON_FILE);
        std::fs::write(&input, b"{}").unwrap();
        // Through a link too: the link is another name of the same file.
        let link = dir.path().join("page.html");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let driver = DriverArgs { url: None };
        for page in [input.clone(), link] {
            let name = dir.path().display().to_string();
            let error = runtime
                .block_on(run(&name, &driver, Show::Html(&page)))
                .unwrap_err();
            assert_eq!(
                error.to_string(),
                format!(
                    "the output --html {} is the input {}; write to another file",
                    page.display(),
                    input.display()
                )
            );
            assert_eq!(std::fs::read(&input).unwrap(), b"{}");
        }
    }
}
