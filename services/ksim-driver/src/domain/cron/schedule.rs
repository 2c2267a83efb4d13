//! A CronJob's schedule as Kubernetes reads it (robfig/cron's standard parser), evaluated by
//! croner: five fields, `@hourly`-style descriptors and `@every <duration>`, in the CronJob's
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

/// Why a CronJob's schedule cannot be played.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule {schedule:?}: {reason}")]
    Invalid {
        schedule: String,
        reason: ScheduleProblem,
    },
    #[error("spec.timeZone {0:?} is not an IANA time zone")]
    UnknownZone(String),
    #[error("spec.schedule is missing or not a string")]
    Missing,
}

/// What is wrong with a schedule's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleProblem {
    #[error("a time zone in the schedule is refused by Kubernetes; spec.timeZone sets it")]
    ZoneInSchedule,
    #[error("unknown descriptor")]
    UnknownDescriptor,
    #[error("expected 5 fields (minute hour day-of-month month day-of-week), found {0}")]
    FieldCount(usize),
    #[error("@every {text:?} is not a duration: {reason}")]
    NotADuration { text: String, reason: String },
    /// The cron library's own words about a field.
    #[error("{0}")]
    Pattern(String),
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
        let invalid = |reason: ScheduleProblem| ScheduleError::Invalid {
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
            return Err(invalid(ScheduleProblem::ZoneInSchedule));
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
                    .map_err(|error| invalid(ScheduleProblem::Pattern(error.to_string())))?;
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
fn standard_pattern(text: &str) -> Result<String, ScheduleProblem> {
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
        return Err(ScheduleProblem::UnknownDescriptor);
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(ScheduleProblem::FieldCount(fields.len()));
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
fn every_interval(text: &str) -> Result<Duration, ScheduleProblem> {
    let interval =
        humantime::parse_duration(text).map_err(|error| ScheduleProblem::NotADuration {
            text: text.to_owned(),
            reason: error.to_string(),
        })?;
    Ok(Duration::from_secs(interval.as_secs().max(1)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

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
        // 2026-01-01 is a Thursday. (schedule, after, next run)
        let cases = [
            (
                "*/15 * * * *",
                "2026-01-01T00:07:00Z",
                "2026-01-01T00:15:00Z",
            ),
            // Strictly after: a run exactly at `after` is the previous one.
            ("0 * * * *", "2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"),
            ("@daily", "2026-01-01T01:00:00Z", "2026-01-02T00:00:00Z"),
            ("@midnight", "2026-01-01T01:00:00Z", "2026-01-02T00:00:00Z"),
            ("@weekly", "2026-01-01T01:00:00Z", "2026-01-04T00:00:00Z"),
            (
                "30 2 * * MON-FRI",
                "2026-01-02T03:00:00Z",
                "2026-01-05T02:30:00Z",
            ),
            (
                "@every 90m",
                "2026-01-01T00:00:30.500Z",
                "2026-01-01T01:30:30Z",
            ),
        ];
        for (schedule, after, expected) in cases {
            assert_eq!(next(schedule, None, after), expected, "{schedule}");
        }
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
}
