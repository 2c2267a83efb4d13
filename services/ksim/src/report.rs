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
        let report = crate::compare::load(id, driver).await?;
        crate::page::write_html(&report, path)?;
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
