//! What each run of a fanned-out experiment is doing (`ksim_fanout::runs`), shown as a bar per
//! run on a terminal and a line per change otherwise.

use std::{collections::BTreeMap, io::Write, time::Duration};

use ksim_experiment::experiment::Experiment;
use ksim_fanout::runs::RunState;

use super::plan;

/// A bar per run when the output is a terminal; a line per change otherwise.
pub struct Bars {
    multi: indicatif::MultiProgress,
    bars: BTreeMap<u32, indicatif::ProgressBar>,
    labels: BTreeMap<u32, String>,
}

impl Bars {
    pub fn new(runs: &[plan::Run], experiment: &Experiment, todo: &[u32]) -> Self {
        let multi = indicatif::MultiProgress::new();
        let style =
            indicatif::ProgressStyle::with_template("{spinner} {prefix:<24} {elapsed:>4} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
        let mut bars = BTreeMap::new();
        let mut labels = BTreeMap::new();
        for run in runs.iter().filter(|run| todo.contains(&run.index)) {
            let label = format!(
                "{} #{}",
                experiment
                    .variants
                    .get(run.variant)
                    .map_or("?", |v| v.name.as_str()),
                run.repeat
            );
            let bar = multi.add(indicatif::ProgressBar::new_spinner());
            bar.set_style(style.clone());
            bar.set_prefix(label.clone());
            bar.enable_steady_tick(Duration::from_millis(200));
            bars.insert(run.index, bar);
            labels.insert(run.index, label);
        }
        Self {
            multi,
            bars,
            labels,
        }
    }

    pub fn set(
        &self,
        index: u32,
        state: &RunState,
        elapsed: Duration,
        out: &mut impl Write,
    ) -> anyhow::Result<()> {
        if let Some(bar) = self.bars.get(&index) {
            bar.set_message(state.to_string());
            if matches!(state, RunState::Collected | RunState::Failed) {
                bar.finish();
            }
        }
        if self.multi.is_hidden() {
            writeln!(
                out,
                "ksim experiment: [{:>5}s] {}: {state}",
                elapsed.as_secs(),
                self.labels.get(&index).map_or("?", String::as_str)
            )?;
        }
        Ok(())
    }

    pub fn finish(&self) {
        for bar in self.bars.values() {
            bar.finish();
        }
    }
}
