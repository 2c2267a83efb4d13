//! CronJob schedules in recorded time.
//!
//! A replay cannot leave a CronJob to the cronjob controller: the controller fires on the
//! simulated cluster's clock, whose time of day is not the recording's and which a replay at
//! speed S passes S times too slowly. So the driver applies replayed CronJobs suspended and
//! plays their runs itself ([`runs`]), at the recorded times the controller would have picked,
//! divided by the speed like every other step.
//!
//! The schedules are those Kubernetes accepts (robfig/cron's standard parser): five fields,
//! `@hourly`-style descriptors and `@every <duration>`; evaluated by croner in the CronJob's
//! `spec.timeZone` (UTC when unset, as a control plane on UTC hosts runs them). Where
//! robfig/cron and croner differ, the pattern is normalised first: `?` is `*` in every field,
//! and a day field counts as unrestricted (so day-of-month and day-of-week are ANDed, not ORed)
//! when one of its parts is `*` or `?` with no step above 1, as robfig/cron decides.

use std::time::Duration;

use chrono::{DateTime, TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::{
    Cron,
    parser::{CronParser, Seconds, Year},
};
use k8s_openapi::{
    api::batch::v1::{CronJob, Job},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use serde_json::Value;

/// Why a CronJob's schedule cannot be played.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule {schedule:?}: {reason}")]
    Invalid { schedule: String, reason: String },
    #[error("spec.timeZone {0:?} is not an IANA time zone")]
    UnknownZone(String),
    #[error("spec.schedule is missing or not a string")]
    Missing,
}

/// A parsed schedule and the zone its fields are read in.
#[derive(Debug, Clone)]
pub struct Schedule {
    every: Every,
    zone: Tz,
}

#[derive(Debug, Clone)]
enum Every {
    Pattern(Box<Cron>),
    /// `@every <duration>`: whole seconds, at least one, after the last run.
    Interval(Duration),
}

impl Schedule {
    pub fn parse(schedule: &str, time_zone: Option<&str>) -> Result<Self, ScheduleError> {
        let invalid = |reason: String| ScheduleError::Invalid {
            schedule: schedule.to_owned(),
            reason,
        };
        let zone = match time_zone {
            None => Tz::UTC,
            Some(name) => name
                .parse::<Tz>()
                .map_err(|_| ScheduleError::UnknownZone(name.to_owned()))?,
        };
        let text = schedule.trim();
        if text.starts_with("TZ=") || text.starts_with("CRON_TZ=") {
            return Err(invalid(
                "a time zone in the schedule is refused by Kubernetes; spec.timeZone sets it"
                    .to_owned(),
            ));
        }
        let every = match text.strip_prefix("@every ") {
            Some(interval) => Every::Interval(every_interval(interval.trim()).map_err(invalid)?),
            None => {
                let pattern = standard_pattern(text).map_err(invalid)?;
                let cron = CronParser::builder()
                    .seconds(Seconds::Disallowed)
                    .year(Year::Disallowed)
                    .build()
                    .parse(&pattern)
                    .map_err(|error| invalid(error.to_string()))?;
                Every::Pattern(Box::new(cron))
            }
        };
        Ok(Self { every, zone })
    }

    /// The first run strictly after `after_ms` (Unix ms), if the schedule has one.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match &self.every {
            Every::Interval(interval) => {
                let whole_seconds = after_ms.div_euclid(1000) * 1000;
                let step = i64::try_from(interval.as_millis()).ok()?;
                whole_seconds.checked_add(step)
            }
            Every::Pattern(cron) => {
                let after = self.zone.timestamp_millis_opt(after_ms).single()?;
                let next = cron.find_next_occurrence(&after, false).ok()?;
                Some(next.timestamp_millis())
            }
        }
    }

    /// `ms` as RFC 3339 in the schedule's zone, as the controller writes a Job's
    /// `batch.kubernetes.io/cronjob-scheduled-timestamp`.
    pub fn timestamp(&self, ms: i64) -> String {
        match self.zone.timestamp_millis_opt(ms).single() {
            Some(time) => time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            None => DateTime::<Utc>::default().to_rfc3339(),
        }
    }
}

/// A robfig/cron five-field pattern (or descriptor) as croner reads it the same way.
fn standard_pattern(text: &str) -> Result<String, String> {
    let descriptor = match text.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => Some("0 0 1 1 *"),
        "@monthly" => Some("0 0 1 * *"),
        "@weekly" => Some("0 0 * * 0"),
        "@daily" | "@midnight" => Some("0 0 * * *"),
        "@hourly" => Some("0 * * * *"),
        _ => None,
    };
    if let Some(pattern) = descriptor {
        return Ok(pattern.to_owned());
    }
    if text.starts_with('@') {
        return Err("unknown descriptor".to_owned());
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
            fields.len()
        ));
    }
    let normalised: Vec<String> = fields
        .iter()
        .enumerate()
        .map(|(index, field)| {
            let is_day = index == 2 || index == 4;
            if is_day && unrestricted(field) {
                "*".to_owned()
            } else {
                field
                    .split(',')
                    .map(|part| match part.strip_prefix('?') {
                        Some(rest) => format!("*{rest}"),
                        None => part.to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            }
        })
        .collect();
    Ok(normalised.join(" "))
}

/// Whether robfig/cron marks a day field as `*`: one of its parts is `*` or `?`, with no step
/// or a step of 1. Such a part matches every day, so the whole field does.
fn unrestricted(field: &str) -> bool {
    field.split(',').any(|part| {
        let (range, step) = part.split_once('/').unwrap_or((part, "1"));
        matches!(range, "*" | "?") && step.parse::<u32>().is_ok_and(|step| step <= 1)
    })
}

/// The interval of `@every`, in whole seconds and at least one, as robfig/cron rounds it.
fn every_interval(text: &str) -> Result<Duration, String> {
    let interval = humantime::parse_duration(text)
        .map_err(|error| format!("@every {text:?} is not a duration: {error}"))?;
    Ok(Duration::from_secs(interval.as_secs().max(1)))
}

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

/// Label on the Jobs the driver starts for a CronJob, naming it, so that a run lists its
/// CronJob's Jobs without reading every Job of the namespace.
pub const CRONJOB_LABEL: &str = "ksim.io/cronjob";

/// Annotation the cronjob controller puts on each Job: when the run was scheduled.
pub const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// What a run does about its CronJob's Jobs that are still running (`spec.concurrencyPolicy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Start,
    /// `Forbid` with a Job still running: this run is skipped.
    Skip,
    /// `Replace`: these running Jobs are deleted, then the new one starts.
    Replace(Vec<String>),
}

pub fn decide(policy: Option<&str>, running: Vec<String>) -> Decision {
    match policy {
        Some("Forbid") if !running.is_empty() => Decision::Skip,
        Some("Replace") if !running.is_empty() => Decision::Replace(running),
        _ => Decision::Start,
    }
}

/// Whether a Job has finished: a Complete or Failed condition is true, as the controller reads it.
pub fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|condition| {
                matches!(condition.type_.as_str(), "Complete" | "Failed")
                    && condition.status == "True"
            })
        })
}

/// The Job the cronjob controller would create for a run of `cronjob`: its job template,
/// named `name`, controlled by the CronJob (so the controller's history limits and the garbage
/// collector treat it as the CronJob's own) and labelled for [`CRONJOB_LABEL`].
pub fn job(cronjob: &CronJob, name: &str, scheduled: &str) -> Result<Job, String> {
    let (Some(cronjob_name), Some(uid)) = (&cronjob.metadata.name, &cronjob.metadata.uid) else {
        return Err("the CronJob has no name or uid".to_owned());
    };
    let template = cronjob
        .spec
        .as_ref()
        .map(|spec| spec.job_template.clone())
        .ok_or("the CronJob has no spec")?;
    let template_metadata = template.metadata.unwrap_or_default();
    let mut labels = template_metadata.labels.unwrap_or_default();
    labels.insert(CRONJOB_LABEL.to_owned(), cronjob_name.clone());
    let mut annotations = template_metadata.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_ANNOTATION.to_owned(), scheduled.to_owned());
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: cronjob.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".to_owned(),
                kind: "CronJob".to_owned(),
                name: cronjob_name.clone(),
                uid: uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Unix ms of a UTC wall-clock time.
    fn at(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    fn next(schedule: &str, zone: Option<&str>, after: &str) -> String {
        let schedule = Schedule::parse(schedule, zone).unwrap();
        let ms = schedule.next_after(at(after)).unwrap();
        Utc.timestamp_millis_opt(ms)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }

    #[test]
    fn five_fields_and_descriptors_run_when_the_controller_would() {
        // 2026-01-01 is a Thursday.
        assert_eq!(
            next("*/15 * * * *", None, "2026-01-01T00:07:00Z"),
            "2026-01-01T00:15:00Z"
        );
        // Strictly after: a run exactly at `after` is the previous one.
        assert_eq!(
            next("0 * * * *", None, "2026-01-01T01:00:00Z"),
            "2026-01-01T02:00:00Z"
        );
        assert_eq!(
            next("@daily", None, "2026-01-01T01:00:00Z"),
            "2026-01-02T00:00:00Z"
        );
        assert_eq!(
            next("@midnight", None, "2026-01-01T01:00:00Z"),
            "2026-01-02T00:00:00Z"
        );
        assert_eq!(
            next("@weekly", None, "2026-01-01T01:00:00Z"),
            "2026-01-04T00:00:00Z"
        );
        assert_eq!(
            next("30 2 * * MON-FRI", None, "2026-01-02T03:00:00Z"),
            "2026-01-05T02:30:00Z"
        );
        assert_eq!(
            next("@every 90m", None, "2026-01-01T00:00:30.500Z"),
            "2026-01-01T01:30:30Z"
        );
    }

    #[test]
    fn day_fields_are_ored_only_when_both_are_restricted_as_in_robfig_cron() {
        // Both restricted: the 10th OR a Monday (Jan 5 is the first Monday).
        assert_eq!(
            next("0 0 10 * 1", None, "2026-01-01T00:00:00Z"),
            "2026-01-05T00:00:00Z"
        );
        // `?` and `*/1` leave day-of-month unrestricted: Mondays only, ANDed.
        for unrestricted in ["?", "*/1", "*,10"] {
            assert_eq!(
                next(
                    &format!("0 0 {unrestricted} * 1"),
                    None,
                    "2026-01-06T00:00:00Z"
                ),
                "2026-01-12T00:00:00Z",
                "{unrestricted}"
            );
        }
        // A step above 1 restricts it: every other day from the 1st (the 7th) OR a Monday.
        assert_eq!(
            next("0 0 */2 * 1", None, "2026-01-06T00:00:00Z"),
            "2026-01-07T00:00:00Z"
        );
    }

    #[test]
    fn the_time_zone_moves_the_runs_and_the_timestamp() {
        // 09:00 in New York is 14:00 UTC in winter.
        assert_eq!(
            next(
                "0 9 * * *",
                Some("America/New_York"),
                "2026-01-01T00:00:00Z"
            ),
            "2026-01-01T14:00:00Z"
        );
        let schedule = Schedule::parse("0 9 * * *", Some("Europe/Paris")).unwrap();
        assert_eq!(
            schedule.timestamp(at("2026-01-01T08:00:00Z")),
            "2026-01-01T09:00:00+01:00"
        );
    }

    #[test]
    fn bad_schedules_and_zones_are_named() {
        let error = Schedule::parse("0 0 * *", None).unwrap_err();
        assert!(error.to_string().contains("expected 5 fields"), "{error}");
        assert!(error.to_string().contains("\"0 0 * *\""), "{error}");
        assert!(Schedule::parse("61 * * * *", None).is_err());
        assert!(Schedule::parse("@fortnightly", None).is_err());
        assert!(Schedule::parse("@every soon", None).is_err());
        assert!(Schedule::parse("TZ=UTC 0 * * * *", None).is_err());
        assert_eq!(
            Schedule::parse("0 * * * *", Some("Mars/Olympus")).unwrap_err(),
            ScheduleError::UnknownZone("Mars/Olympus".to_owned())
        );
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

    #[test]
    fn a_run_starts_the_job_template_controlled_by_the_cronjob() {
        let cronjob: CronJob = serde_json::from_value(json!({
            "metadata": {"name": "nightly", "namespace": "p-batch", "uid": "u-1"},
            "spec": {"schedule": "@daily", "jobTemplate": {
                "metadata": {"labels": {"team": "data"}},
                "spec": {"backoffLimit": 2, "template": {"spec": {"containers": [], "restartPolicy": "Never"}}},
            }},
        }))
        .unwrap();
        let job = job(&cronjob, "nightly-29453760", "2026-01-01T00:00:00Z").unwrap();
        let value = serde_json::to_value(&job).unwrap();
        assert_eq!(value["metadata"]["namespace"], "p-batch");
        assert_eq!(value["metadata"]["labels"]["team"], "data");
        assert_eq!(value["metadata"]["labels"][CRONJOB_LABEL], "nightly");
        assert_eq!(
            value["metadata"]["annotations"][SCHEDULED_ANNOTATION],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            value["metadata"]["ownerReferences"],
            json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "u-1",
                    "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(value["spec"]["backoffLimit"], 2);

        let unsaved: CronJob = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert!(super::job(&unsaved, "x-1", "").is_err());
    }

    #[test]
    fn concurrency_policy_decides_about_running_jobs() {
        let running = vec!["nightly-1".to_owned()];
        assert_eq!(decide(None, running.clone()), Decision::Start);
        assert_eq!(decide(Some("Allow"), running.clone()), Decision::Start);
        assert_eq!(decide(Some("Forbid"), running.clone()), Decision::Skip);
        assert_eq!(decide(Some("Forbid"), Vec::new()), Decision::Start);
        assert_eq!(
            decide(Some("Replace"), running.clone()),
            Decision::Replace(running)
        );
        assert_eq!(decide(Some("Replace"), Vec::new()), Decision::Start);

        let job = |conditions: Value| -> Job {
            serde_json::from_value(json!({"metadata": {}, "status": {"conditions": conditions}}))
                .unwrap()
        };
        assert!(finished(&job(
            json!([{"type": "Complete", "status": "True"}])
        )));
        assert!(finished(&job(
            json!([{"type": "Failed", "status": "True"}])
        )));
        assert!(!finished(&job(
            json!([{"type": "Suspended", "status": "True"}])
        )));
        assert!(!finished(&job(
            json!([{"type": "Complete", "status": "False"}])
        )));
    }
}
