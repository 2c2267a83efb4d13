//! One delay of the provisioning model as a distribution in recorded time: a fixed value,
//! percentiles (a log-normal through them), or a recording's own samples.
//!
//! In a file a fixed delay is a duration (`30s`); percentiles are `{p50: 40s, p90: 70s}` with
//! `p99` optional; samples are `{samples: [38s, 41s, 55s]}`. Durations use Go's syntax, as CA's
//! flags do.

use std::fmt;
use std::time::Duration;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::go_duration;

/// The longest delay a model may give: a day. A node that takes longer to boot is a failure
/// to model as one, not a delay.
pub const MAX_DELAY: Duration = Duration::from_secs(24 * 3600);

/// The most samples one delay may hold, so a model file's size stays sane.
pub const MAX_SAMPLES: usize = 100_000;

/// The standard normal's quantiles at 0.9 and 0.99: where p90 and p99 sit on the z axis.
const Z90: f64 = 1.281_551_565_545;
const Z99: f64 = 2.326_347_874_041;

/// A sample further out than this many standard deviations is clamped: the tail past it is a
/// one in 30,000 event the percentiles say nothing about.
const Z_LIMIT: f64 = 4.0;

/// A distribution of one delay, in recorded time.
#[derive(Debug, Clone, PartialEq)]
pub enum Delay {
    Fixed(Duration),
    /// A log-normal through `p50` and `p90`; above p90 the slope bends to meet `p99` if given.
    Percentiles {
        p50: Duration,
        p90: Option<Duration>,
        p99: Option<Duration>,
    },
    /// The empirical distribution of recorded delays: each draw is one of them.
    Samples(Vec<Duration>),
}

impl Default for Delay {
    fn default() -> Self {
        Self::Fixed(Duration::ZERO)
    }
}

/// Why a delay cannot be taken; the model adds the field's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DelayError {
    #[error(
        "{value} is longer than {} (a day): a delay that long is a failure, not a delay",
        go_duration::format(MAX_DELAY)
    )]
    Absurd { value: String },
    #[error("{larger} ({}) is shorter than {smaller} ({})", go_duration::format(*larger_value), go_duration::format(*smaller_value))]
    Inverted {
        smaller: &'static str,
        smaller_value: Duration,
        larger: &'static str,
        larger_value: Duration,
    },
    #[error("p50 must be above 0 (a delay of 0 is written 0s)")]
    ZeroMedian,
    #[error("samples: give at least one")]
    NoSamples,
    #[error("samples: at most {MAX_SAMPLES}, got {0}")]
    TooManySamples(usize),
}

impl Delay {
    /// A fixed delay of `seconds`.
    pub fn fixed_secs(seconds: u64) -> Self {
        Self::Fixed(Duration::from_secs(seconds))
    }

    /// Whether every draw is zero.
    pub fn is_zero(&self) -> bool {
        matches!(self, Self::Fixed(d) if d.is_zero())
    }

    /// Checks the bounds and the order of the percentiles.
    pub fn check(&self) -> Result<(), DelayError> {
        let bounded = |d: Duration| {
            if d > MAX_DELAY {
                Err(DelayError::Absurd {
                    value: go_duration::format(d),
                })
            } else {
                Ok(())
            }
        };
        match self {
            Self::Fixed(d) => bounded(*d),
            Self::Percentiles { p50, p90, p99 } => {
                if p50.is_zero() {
                    return Err(DelayError::ZeroMedian);
                }
                let given = [("p50", Some(*p50)), ("p90", *p90), ("p99", *p99)];
                let given: Vec<(&'static str, Duration)> = given
                    .into_iter()
                    .filter_map(|(name, d)| Some((name, d?)))
                    .collect();
                for (_, d) in &given {
                    bounded(*d)?;
                }
                for pair in given.windows(2) {
                    let [(smaller, smaller_value), (larger, larger_value)] = pair else {
                        continue;
                    };
                    if larger_value < smaller_value {
                        return Err(DelayError::Inverted {
                            smaller,
                            smaller_value: *smaller_value,
                            larger,
                            larger_value: *larger_value,
                        });
                    }
                }
                Ok(())
            }
            Self::Samples(samples) => {
                if samples.is_empty() {
                    return Err(DelayError::NoSamples);
                }
                if samples.len() > MAX_SAMPLES {
                    return Err(DelayError::TooManySamples(samples.len()));
                }
                samples.iter().try_for_each(|d| bounded(*d))
            }
        }
    }

    /// One draw, from two independent uniform numbers in [0, 1) (a seeded stream's): the
    /// same numbers give the same delay.
    pub fn draw(&self, u1: f64, u2: f64) -> Duration {
        match self {
            Self::Fixed(d) => *d,
            Self::Samples(samples) => {
                // `u1 < 1`, so the index is in range; an empty list was refused by `check`.
                let index = ((u1 * samples.len() as f64) as usize).min(samples.len() - 1);
                samples.get(index).copied().unwrap_or_default()
            }
            Self::Percentiles { .. } => self.at_z(standard_normal(u1, u2)),
        }
    }

    /// The delay at `z` standard deviations: ln(delay) is linear in z between the given
    /// percentiles (a log-normal through p50 and p90), bending at p90 towards p99.
    pub fn at_z(&self, z: f64) -> Duration {
        let Self::Percentiles { p50, p90, p99 } = self else {
            return self.draw(0.5, 0.0);
        };
        let z = z.clamp(-Z_LIMIT, Z_LIMIT);
        let ln = |d: Duration| d.as_secs_f64().ln();
        let ln50 = ln(*p50);
        // The slope below p90 (and below p50: a log-normal is symmetric in ln).
        let low_slope = match (p90, p99) {
            (Some(p90), _) => (ln(*p90) - ln50) / Z90,
            (None, Some(p99)) => (ln(*p99) - ln50) / Z99,
            (None, None) => 0.0,
        };
        let ln_delay = match (p90, p99) {
            (Some(p90), Some(p99)) if z > Z90 => {
                let high_slope = (ln(*p99) - ln(*p90)) / (Z99 - Z90);
                ln(*p90) + (z - Z90) * high_slope
            }
            _ => ln50 + z * low_slope,
        };
        Duration::try_from_secs_f64(ln_delay.exp())
            .unwrap_or(MAX_DELAY)
            .min(MAX_DELAY)
    }

    /// The delay's median, for one-line summaries.
    pub fn median(&self) -> Duration {
        match self {
            Self::Fixed(d) => *d,
            Self::Percentiles { p50, .. } => *p50,
            Self::Samples(samples) => {
                let mut sorted = samples.clone();
                sorted.sort();
                sorted.get(sorted.len() / 2).copied().unwrap_or_default()
            }
        }
    }
}

/// A standard normal number from two uniforms (Box–Muller).
fn standard_normal(u1: f64, u2: f64) -> f64 {
    // 1 - u1 is in (0, 1], so its logarithm is finite.
    (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

impl fmt::Display for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |d: &Duration| go_duration::format(*d);
        match self {
            Self::Fixed(value) => write!(f, "{}", d(value)),
            Self::Percentiles { p50, p90, p99 } => {
                write!(f, "p50 {}", d(p50))?;
                if let Some(p90) = p90 {
                    write!(f, " p90 {}", d(p90))?;
                }
                if let Some(p99) = p99 {
                    write!(f, " p99 {}", d(p99))?;
                }
                Ok(())
            }
            Self::Samples(samples) => {
                write!(f, "{} samples, median {}", samples.len(), d(&self.median()))
            }
        }
    }
}

impl Serialize for Delay {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = |d: &Duration| go_duration::format(*d);
        match self {
            Self::Fixed(d) => serializer.serialize_str(&text(d)),
            Self::Percentiles { p50, p90, p99 } => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("p50", &text(p50))?;
                if let Some(p90) = p90 {
                    map.serialize_entry("p90", &text(p90))?;
                }
                if let Some(p99) = p99 {
                    map.serialize_entry("p99", &text(p99))?;
                }
                map.end()
            }
            Self::Samples(samples) => {
                let mut map = serializer.serialize_map(Some(1))?;
                let texts: Vec<String> = samples.iter().map(text).collect();
                map.serialize_entry("samples", &texts)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Delay {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DelayVisitor)
    }
}

struct DelayVisitor;

fn duration<E: de::Error>(key: &str, text: &str) -> Result<Duration, E> {
    go_duration::parse(text).map_err(|error| match error {
        go_duration::DurationError::Negative(_) => {
            E::custom(format!("{key}{text:?} is negative: a delay must not be"))
        }
        other => E::custom(format!("{key}{other}")),
    })
}

impl<'de> Visitor<'de> for DelayVisitor {
    type Value = Delay;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration (30s), {p50: 40s, p90: 70s, p99: 2m} or {samples: [38s, 41s]}")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Delay, E> {
        duration("", text).map(Delay::Fixed)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Delay, E> {
        if value == 0 {
            Ok(Delay::Fixed(Duration::ZERO))
        } else {
            Err(E::custom(format!(
                "{value} has no unit: write {value}s, {value}m or {value}ms"
            )))
        }
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Delay, E> {
        self.visit_i64(i64::try_from(value).unwrap_or(i64::MAX))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Delay, E> {
        Err(E::custom(format!(
            "{value} has no unit: write {value}s, {value}m or {value}ms"
        )))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Delay, A::Error> {
        let (mut p50, mut p90, mut p99, mut samples) = (None, None, None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "p50" => p50 = Some(duration("p50: ", &map.next_value::<String>()?)?),
                "p90" => p90 = Some(duration("p90: ", &map.next_value::<String>()?)?),
                "p99" => p99 = Some(duration("p99: ", &map.next_value::<String>()?)?),
                "samples" => {
                    let texts: Vec<String> = map.next_value()?;
                    if texts.len() > MAX_SAMPLES {
                        return Err(de::Error::custom(DelayError::TooManySamples(texts.len())));
                    }
                    let parsed = texts
                        .iter()
                        .map(|text| duration("samples: ", text))
                        .collect::<Result<Vec<_>, _>>()?;
                    samples = Some(parsed);
                }
                other => {
                    return Err(de::Error::custom(format!(
                        "unknown key {other:?}: a delay is a duration, p50/p90/p99 or samples"
                    )));
                }
            }
        }
        match (p50, p90, p99, samples) {
            (None, None, None, Some(samples)) => Ok(Delay::Samples(samples)),
            (Some(_), _, _, Some(_)) | (None, Some(_) | None, Some(_) | None, Some(_)) => Err(
                de::Error::custom("give either percentiles or samples, not both"),
            ),
            (Some(p50), p90, p99, None) => Ok(Delay::Percentiles { p50, p90, p99 }),
            (None, _, _, None) => Err(de::Error::custom(
                "percentiles need p50 (p90 and p99 are optional)",
            )),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn yaml(text: &str) -> Result<Delay, String> {
        serde_saphyr::from_str::<Delay>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_delay_is_a_duration_percentiles_or_samples() {
        assert_eq!(yaml("30s").unwrap(), Delay::fixed_secs(30));
        assert_eq!(yaml("0").unwrap(), Delay::Fixed(Duration::ZERO));
        assert_eq!(
            yaml("{p50: 40s, p90: 70s}").unwrap(),
            Delay::Percentiles {
                p50: secs(40.0),
                p90: Some(secs(70.0)),
                p99: None
            }
        );
        assert_eq!(
            yaml("samples: [1s, 1.5s]").unwrap(),
            Delay::Samples(vec![secs(1.0), secs(1.5)])
        );
        for (bad, says) in [
            ("-5s", "negative"),
            ("30", "no unit"),
            ("{p90: 1m}", "need p50"),
            ("{p50: 1m, samples: [1s]}", "not both"),
            ("{p50: 1m, mean: 2m}", "unknown key \"mean\""),
            ("{p50: ten}", "p50: \"ten\" is not a duration"),
        ] {
            let error = yaml(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn checks_refuse_inverted_absurd_and_empty_delays() {
        let inverted = Delay::Percentiles {
            p50: secs(60.0),
            p90: Some(secs(30.0)),
            p99: None,
        };
        assert_eq!(
            inverted.check().unwrap_err().to_string(),
            "p90 (30s) is shorter than p50 (1m)"
        );
        let inverted_tail = Delay::Percentiles {
            p50: secs(10.0),
            p90: Some(secs(30.0)),
            p99: Some(secs(20.0)),
        };
        assert!(
            inverted_tail
                .check()
                .unwrap_err()
                .to_string()
                .contains("p99 (20s)")
        );
        assert!(matches!(
            Delay::Fixed(secs(90_000.0)).check(),
            Err(DelayError::Absurd { .. })
        ));
        assert_eq!(Delay::Samples(vec![]).check(), Err(DelayError::NoSamples));
        assert_eq!(
            Delay::Percentiles {
                p50: Duration::ZERO,
                p90: None,
                p99: None
            }
            .check(),
            Err(DelayError::ZeroMedian)
        );
        assert!(Delay::fixed_secs(30).check().is_ok());
    }

    #[test]
    fn percentiles_are_met_at_their_z() {
        let delay = Delay::Percentiles {
            p50: secs(40.0),
            p90: Some(secs(70.0)),
            p99: Some(secs(150.0)),
        };
        let close = |a: Duration, b: f64| (a.as_secs_f64() - b).abs() < 0.01;
        assert!(close(delay.at_z(0.0), 40.0));
        assert!(close(delay.at_z(Z90), 70.0));
        assert!(close(delay.at_z(Z99), 150.0));
        // Below the median, the log-normal through p50 and p90 continues.
        assert!(close(delay.at_z(-Z90), 40.0 * 40.0 / 70.0));
        // Far tails are clamped, not infinite.
        assert!(delay.at_z(100.0) <= MAX_DELAY);
    }

    #[test]
    fn draws_follow_the_percentiles() {
        let delay = Delay::Percentiles {
            p50: secs(40.0),
            p90: Some(secs(70.0)),
            p99: None,
        };
        let mut rng = fastrand::Rng::with_seed(7);
        let mut draws: Vec<f64> = (0..20_000)
            .map(|_| delay.draw(rng.f64(), rng.f64()).as_secs_f64())
            .collect();
        draws.sort_by(f64::total_cmp);
        let at = |q: f64| draws[(q * draws.len() as f64) as usize];
        assert!((at(0.5) - 40.0).abs() < 1.5, "p50 {}", at(0.5));
        assert!((at(0.9) - 70.0).abs() < 3.0, "p90 {}", at(0.9));
    }

    #[test]
    fn samples_draw_each_recorded_value() {
        let delay = Delay::Samples(vec![secs(1.0), secs(2.0), secs(3.0)]);
        assert_eq!(delay.draw(0.0, 0.0), secs(1.0));
        assert_eq!(delay.draw(0.5, 0.0), secs(2.0));
        assert_eq!(delay.draw(0.999, 0.0), secs(3.0));
        assert_eq!(delay.median(), secs(2.0));
    }

    #[test]
    fn a_delay_writes_what_it_reads() {
        for delay in [
            Delay::fixed_secs(30),
            Delay::Percentiles {
                p50: secs(40.0),
                p90: Some(secs(70.0)),
                p99: Some(secs(120.5)),
            },
            Delay::Samples(vec![secs(1.25), secs(3.0)]),
        ] {
            let text = serde_saphyr::to_string(&delay).unwrap();
            assert_eq!(yaml(&text).unwrap(), delay, "{text}");
        }
    }
}
