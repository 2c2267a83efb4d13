//! What `ksim run` shows while a simulation runs: a progress bar on stderr (drawn only on a
//! terminal), or one line per state change when there is no bar.

use std::{io::Write, time::Duration};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ksim_proto::ksim::driver::v1::{SimulationProgress, SimulationState};

#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    state: SimulationState,
}

impl Progress {
    pub fn new(show_bar: bool) -> Self {
        let bar = show_bar.then(|| {
            let bar = ProgressBar::new(0).with_style(
                ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} events  {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        Self {
            bar,
            state: SimulationState::Unspecified,
        }
    }

    pub fn update(
        &mut self,
        snapshot: &SimulationProgress,
        out: &mut impl Write,
    ) -> std::io::Result<()> {
        let state = snapshot.state();
        match &self.bar {
            Some(bar) => {
                bar.set_length(snapshot.events_total);
                bar.set_position(snapshot.events_applied);
                bar.set_message(describe(snapshot));
            }
            None if state != self.state => {
                writeln!(out, "  {}: {}", state_name(state), describe(snapshot))?;
            }
            None => {}
        }
        self.state = state;
        Ok(())
    }

    /// A line that must not be drawn over by the bar.
    pub fn note(&self, line: &str, out: &mut impl Write) -> std::io::Result<()> {
        match &self.bar {
            Some(bar) => {
                bar.suspend(|| writeln!(out, "{line}"))?;
            }
            None => writeln!(out, "{line}")?,
        }
        Ok(())
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `lateness 1.2ms | nodes 3/3 ready | pods 2 pending (1 unscheduled), 5 running, ...`
pub fn describe(snapshot: &SimulationProgress) -> String {
    let lateness = snapshot
        .last_event_lateness
        .map_or(0.0, |d| d.seconds as f64 * 1e3 + f64::from(d.nanos) / 1e6);
    let nodes: u64 = snapshot.nodes.iter().map(|group| group.nodes).sum();
    let ready: u64 = snapshot.nodes.iter().map(|group| group.ready_nodes).sum();
    let pods = snapshot.pods.unwrap_or_default();
    let mut line = format!(
        "lateness {lateness:.1}ms | nodes {ready}/{nodes} ready | pods {} pending ({} unscheduled), {} running, {} succeeded, {} failed",
        pods.pending, snapshot.unscheduled_pods, pods.running, pods.succeeded, pods.failed
    );
    if snapshot.object_errors > 0 {
        line.push_str(&format!(" | {} refused", snapshot.object_errors));
    }
    line
}

/// A state as the CLI prints it.
pub fn state_name(state: SimulationState) -> &'static str {
    match state {
        SimulationState::Unspecified => "in an unknown state",
        SimulationState::Pending => "pending",
        SimulationState::Running => "running",
        SimulationState::Succeeded => "succeeded",
        SimulationState::Failed => "FAILED",
        SimulationState::Cancelled => "cancelled",
    }
}

#[cfg(test)]
mod tests {
    use ksim_proto::ksim::driver::v1::{NodeGroupCount, PodPhaseCounts};

    use super::*;

    fn snapshot(state: SimulationState) -> SimulationProgress {
        SimulationProgress {
            state: state as i32,
            events_applied: 5,
            events_total: 10,
            last_event_lateness: Some(prost_types::Duration {
                seconds: 0,
                nanos: 1_500_000,
            }),
            nodes: vec![
                NodeGroupCount {
                    node_group: "a".into(),
                    nodes: 2,
                    ready_nodes: 1,
                    ..NodeGroupCount::default()
                },
                NodeGroupCount {
                    node_group: "b".into(),
                    nodes: 1,
                    ready_nodes: 1,
                    ..NodeGroupCount::default()
                },
            ],
            pods: Some(PodPhaseCounts {
                pending: 2,
                running: 5,
                succeeded: 1,
                failed: 0,
                unknown: 0,
            }),
            unscheduled_pods: 1,
            object_errors: 3,
            ..SimulationProgress::default()
        }
    }

    #[test]
    fn description_sums_groups_and_shows_refusals() {
        assert_eq!(
            describe(&snapshot(SimulationState::Running)),
            "lateness 1.5ms | nodes 2/3 ready | pods 2 pending (1 unscheduled), 5 running, 1 succeeded, 0 failed | 3 refused"
        );
    }

    #[test]
    fn without_a_bar_only_state_changes_are_written() {
        let mut progress = Progress::new(false);
        let mut out = Vec::new();
        progress
            .update(&snapshot(SimulationState::Running), &mut out)
            .unwrap();
        progress
            .update(&snapshot(SimulationState::Running), &mut out)
            .unwrap();
        progress
            .update(&snapshot(SimulationState::Succeeded), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.starts_with("  running: lateness"), "{text}");
    }
}
