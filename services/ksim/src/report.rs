//! `ksim report <ID>`: a simulation's report, summarised or as JSON.

use std::io::Write;

use crate::driver::{DriverArgs, connect, get_report};

pub async fn run(id: &str, driver: &DriverArgs, json: bool) -> anyhow::Result<()> {
    let mut client = connect(&driver.resolve()?).await?;
    let report = get_report(&mut client, id).await?;
    let mut out = std::io::stdout().lock();
    if json {
        // The driver's own JSON form (the one report.json holds), not the proto's.
        let report = ksim_report::Report::from_proto(&report);
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", ksim_report::summary(&report))?;
    }
    Ok(())
}
