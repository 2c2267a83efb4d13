//! CronJob schedules in recorded time.
//!
//! A replay cannot leave a CronJob to the cronjob controller: the controller fires on the
//! simulated cluster's clock, whose time of day is not the recording's and which a replay at
//! speed S passes S times too slowly. So the driver applies replayed CronJobs suspended and
//! plays their runs itself ([`runs`]), at the recorded times the controller would have picked,
//! divided by the speed like every other step.
//!
//! Three parts: `schedule` reads a schedule as Kubernetes does and finds its times; this
//! module finds the runs of one recorded version of a CronJob; `job` is what a run starts, as
//! the controller would.

mod job;
mod schedule;

pub use job::{CRONJOB_LABEL, Decision, NoJob, SCHEDULED_ANNOTATION, decide, finished, job};
pub use schedule::{Schedule, ScheduleError};

use serde_json::Value;

/// What a recorded CronJob says about when it runs.
#[derive(Debug, Clone)]
pub struct CronSpec {
    pub schedule: Schedule,
    /// The recorded `spec.suspend`: while true, no runs.
    pub suspended: bool,
}

impl CronSpec {
    /// Reads `spec.schedule`, `spec.timeZone` and `spec.suspend` of a recorded CronJob.
    pub fn of(object: &Value) -> Result<Self, ScheduleError> {
        let spec = object.get("spec");
        let field = |name: &str| spec.and_then(|spec| spec.get(name));
        let schedule = field("schedule")
            .and_then(Value::as_str)
            .ok_or(ScheduleError::Missing)?;
        let zone = field("timeZone").and_then(Value::as_str);
        Ok(Self {
            schedule: Schedule::parse(schedule, zone)?,
            suspended: field("suspend").and_then(Value::as_bool).unwrap_or(false),
        })
    }
}

/// The recorded times (Unix ms) a CronJob runs at while `spec` is in force: after `from_ms`
/// (the version's apply; a run exactly then has already been started by the version before it),
/// up to and including `until_ms`. At most `limit` runs, so a pathological schedule cannot
/// flood the plan.
pub fn runs(spec: &CronSpec, from_ms: i64, until_ms: i64, limit: usize) -> Vec<i64> {
    if spec.suspended {
        return Vec::new();
    }
    let mut runs = Vec::new();
    let mut after = from_ms;
    while runs.len() < limit {
        match spec.schedule.next_after(after) {
            Some(next) if next <= until_ms => {
                runs.push(next);
                after = next;
            }
            _ => break,
        }
    }
    runs
}

/// The Job the cronjob controller names for a run scheduled at `scheduled_ms`:
/// `<cronjob>-<minutes since the epoch>`.
pub fn job_name(cronjob: &str, scheduled_ms: i64) -> String {
    format!("{cronjob}-{}", scheduled_ms.div_euclid(60_000))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Unix ms of a UTC wall-clock time.
    fn at(text: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn runs_fall_inside_the_version_and_stop_while_suspended() {
        let object = json!({"spec": {"schedule": "0 */6 * * *"}});
        let spec = CronSpec::of(&object).unwrap();
        let runs = runs(
            &spec,
            at("2026-01-01T00:00:00Z"),
            at("2026-01-02T00:00:00Z"),
            100,
        );
        let hours: Vec<i64> = runs.iter().map(|ms| ms / 3_600_000 % 24).collect();
        assert_eq!(hours, [6, 12, 18, 0]);
        let limited = super::runs(&spec, 0, at("2026-01-02T00:00:00Z"), 3);
        assert_eq!(limited.len(), 3);

        let suspended = json!({"spec": {"schedule": "0 * * * *", "suspend": true}});
        let spec = CronSpec::of(&suspended).unwrap();
        assert!(super::runs(&spec, 0, at("2026-01-02T00:00:00Z"), 100).is_empty());
        assert_eq!(
            CronSpec::of(&json!({"spec": {}})).unwrap_err(),
            ScheduleError::Missing
        );
    }

    #[test]
    fn jobs_are_named_by_their_scheduled_minute() {
        assert_eq!(
            job_name("nightly", at("2026-01-01T00:00:00Z")),
            "nightly-29453760"
        );
    }
}
