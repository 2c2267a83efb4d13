//! `ksim report <ID>`: a simulation's report, summarised or as JSON.

use std::io::Write;

use ksim_proto::ksim::driver::v1::{GetSimulationRequest, SimulationState};

use crate::driver::{DriverArgs, connect, get_report};

pub async fn run(id: &str, driver: &DriverArgs, json: bool) -> anyhow::Result<()> {
    let mut client = connect(&driver.resolve()?).await?;
    let report = get_report(&mut client, id).await?;
    let mut out = std::io::stdout().lock();
    if json {
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
