//! Cluster-autoscaler flags as the configuration under test.
//!
//! Users give flags as they run CA in production (`scale-down-unneeded-time=10m`): durations in
//! recorded time. A replay at speed S runs the recorded world S times faster, so CA must too:
//! every flag that measures time *in the simulated cluster* (how long a node stays unneeded,
//! how long provisioning may take, backoffs, the loop's interval) is divided by S, and every
//! rate of it (CA's requests per second to the API server) multiplied by S. Flags that
//! bound CA's own computation (binpacking time, simulation timeouts) or watch its health
//! (max-inactivity) are not: CPU time does not speed up with the replay.
//!
//! A run sets only the flags of [`policy::ALLOWED`] (what CA decides, not where it writes or
//! whom it talks to); whether CA knows a flag at all is for the real binary to say (its
//! `--help`); see [`AutoscalerFlags::check_known`].

pub mod policy;
pub mod recorded;
pub mod unremovable;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use ksim_provisioning::go_duration::{self, DurationError};

/// CA's duration flags that measure time in the simulated cluster, each with the shortest
/// value it is run with at any speed. The scan interval stops at 100 ms: below, CA would spend
/// the whole interval in its loop. The others stop at 1 ms so a non-zero wait stays non-zero.
const DILATED_DURATIONS: [(&str, Duration); 22] = [
    ("scan-interval", Duration::from_millis(100)),
    ("scale-down-delay-after-add", Duration::from_millis(1)),
    ("scale-down-delay-after-delete", Duration::from_millis(1)),
    ("scale-down-delay-after-failure", Duration::from_millis(1)),
    ("scale-down-unneeded-time", Duration::from_millis(1)),
    ("scale-down-unready-time", Duration::from_millis(1)),
    ("max-node-provision-time", Duration::from_millis(1)),
    ("max-node-startup-time", Duration::from_millis(1)),
    ("max-pod-eviction-time", Duration::from_millis(1)),
    ("node-deletion-delay-timeout", Duration::from_millis(1)),
    ("node-deletion-batcher-interval", Duration::from_millis(1)),
    ("node-delete-delay-after-taint", Duration::from_millis(1)),
    ("unremovable-node-recheck-timeout", Duration::from_millis(1)),
    ("new-pod-scale-up-delay", Duration::from_millis(1)),
    (
        "initial-node-group-backoff-duration",
        Duration::from_millis(1),
    ),
    ("max-node-group-backoff-duration", Duration::from_millis(1)),
    ("node-group-backoff-reset-timeout", Duration::from_millis(1)),
    ("node-deletion-candidate-ttl", Duration::from_millis(1)),
    // Time spent soft-tainting nodes through the API server, whose rate is dilated too.
    ("max-bulk-soft-taint-time", Duration::from_millis(1)),
    (
        "provisioning-request-initial-backoff-time",
        Duration::from_millis(1),
    ),
    (
        "provisioning-request-max-backoff-time",
        Duration::from_millis(1),
    ),
    // How long a kube-system pod keeps its node (with skip-nodes-with-system-pods).
    (
        "blocking-system-pod-distruption-timeout",
        Duration::from_millis(1),
    ),
];

/// CA's flags that count simulated time in whole seconds.
const DILATED_SECONDS: [&str; 1] = ["max-graceful-termination-sec"];

/// CA's flags that are rates per second of simulated time, multiplied by the speed. CA's API
/// client allows 5 requests a second by default: left at that at 40x, its taints, deletions and
/// status writes would wait 40 times as long in recorded time as in production.
const DILATED_RATES: [&str; 1] = ["kube-client-qps"];

/// The longest flag name taken (CA's longest is 50 characters): a longer one is refused
/// before anything parses it.
pub const NAME_MAX: usize = 128;

/// The longest flag value taken (CA's are durations, numbers, taints and label lists).
pub const VALUE_MAX: usize = 4096;

/// How much of a user's text an error repeats.
const ECHOED: usize = 64;

/// `text` as an error repeats it: its first [`ECHOED`] characters, and its length if longer.
fn echo(text: &str) -> String {
    match text.char_indices().nth(ECHOED) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}... ({} bytes)", &text[..end], text.len()),
    }
}

/// A flag that cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("cluster-autoscaler flag {start:?}: its {what} is {len} bytes, over the {max} taken")]
    TooLong {
        /// The flag's start, as echoed.
        start: String,
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("cluster-autoscaler flag --{flag}: {value:?} is not {expected}")]
    BadValue {
        flag: String,
        /// As echoed: bounded.
        value: String,
        expected: String,
    },
    #[error("cluster-autoscaler flag {0:?}: give it as FLAG=VALUE, e.g. expander=price")]
    NotFlagValue(String),
    #[error("cluster-autoscaler flag --{flag}: {error}")]
    BadDuration { flag: String, error: DurationError },
    #[error(
        "cluster-autoscaler flag --{flag}: {value:?} is not a whole number of seconds up to {}",
        go_duration::MAX.as_secs()
    )]
    BadSeconds { flag: String, value: String },
    #[error("cluster-autoscaler flag --{flag}: {value:?} is not a rate above 0 (e.g. 5 or 12.5)")]
    BadRate { flag: String, value: String },
    #[error("cluster-autoscaler has no flag --{0} (see cluster-autoscaler --help)")]
    Unknown(String),
    #[error("--{flag} is not a flag a run may set ({family}): {}", family.reason())]
    Refused {
        flag: String,
        family: policy::Family,
    },
    #[error(
        "--{flag} is not a flag a run may set: only the cluster-autoscaler flags that change its \
         decisions are{}",
        suggestion.map_or_else(String::new, |s| format!(" (did you mean --{s}?)"))
    )]
    NotAllowed {
        flag: String,
        suggestion: Option<&'static str>,
    },
}

/// One flag as given, without its dashes: `scale-down-unneeded-time` = `10m`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoscalerFlag {
    pub name: String,
    pub value: String,
}

impl FromStr for AutoscalerFlag {
    type Err = FlagError;

    /// A run's flag: `FLAG=VALUE`, with or without the leading `--`, of a flag a run may set
    /// ([`policy`]).
    fn from_str(text: &str) -> Result<Self, FlagError> {
        let flag = Self::of_environment(text)?;
        if let Some(family) = policy::refused(&flag.name) {
            return Err(FlagError::Refused {
                flag: flag.name,
                family,
            });
        }
        if !policy::allowed(&flag.name) {
            return Err(FlagError::NotAllowed {
                suggestion: policy::suggestion(&flag.name),
                flag: flag.name,
            });
        }
        Ok(flag)
    }
}

impl AutoscalerFlag {
    /// One of the environment's own flags (`--address=...`, `--kubeconfig=...`): like a run's,
    /// but any flag; never for what a run or a user gives.
    pub fn of_environment(text: &str) -> Result<Self, FlagError> {
        let bare = text.strip_prefix("--").unwrap_or(text);
        // Bounded before anything else reads it: a name of 100,000 characters cost seconds.
        let Some(equals) = bare.bytes().take(NAME_MAX + 1).position(|b| b == b'=') else {
            if bare.len() > NAME_MAX {
                return Err(FlagError::TooLong {
                    start: echo(bare),
                    what: "name",
                    len: bare.find('=').unwrap_or(bare.len()),
                    max: NAME_MAX,
                });
            }
            return Err(FlagError::NotFlagValue(echo(text)));
        };
        let (name, value) = (&bare[..equals], &bare[equals + 1..]);
        if value.len() > VALUE_MAX {
            return Err(FlagError::TooLong {
                start: echo(bare),
                what: "value",
                len: value.len(),
                max: VALUE_MAX,
            });
        }
        let well_formed = name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !well_formed {
            return Err(FlagError::NotFlagValue(echo(text)));
        }
        let flag = Self {
            name: name.to_owned(),
            value: value.to_owned(),
        };
        flag.check_value()?;
        Ok(flag)
    }
}

impl fmt::Display for AutoscalerFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{}={}", self.name, self.value)
    }
}

impl AutoscalerFlag {
    /// The value is of the flag's kind ([`policy::kind`]); a flag of no kind (the
    /// environment's own) is CA's to judge.
    fn check_value(&self) -> Result<(), FlagError> {
        let kind = policy::kind(&self.name);
        if is_dilated_duration(&self.name) || kind == Some(policy::Kind::Duration) {
            go_duration::parse(&self.value).map_err(|error| FlagError::BadDuration {
                flag: self.name.clone(),
                error: bounded(error),
            })?;
        } else if DILATED_SECONDS.contains(&self.name.as_str()) {
            self.seconds()?;
        } else if DILATED_RATES.contains(&self.name.as_str()) {
            self.rate()?;
        } else if let Some(kind) = kind
            && !kind.admits(&self.value)
        {
            return Err(FlagError::BadValue {
                flag: self.name.clone(),
                value: echo(&self.value),
                expected: kind.expected(),
            });
        }
        Ok(())
    }

    /// A rate Go reads as a float32 (client-go's QPS): finite, above 0.
    fn rate(&self) -> Result<f64, FlagError> {
        self.value
            .parse::<f64>()
            .ok()
            .filter(|rate| rate.is_finite() && *rate > 0.0 && *rate <= f64::from(f32::MAX))
            .ok_or_else(|| FlagError::BadRate {
                flag: self.name.clone(),
                value: echo(&self.value),
            })
    }

    /// Go counts them in an int64 of nanoseconds: a longer wait would overflow in CA.
    fn seconds(&self) -> Result<u64, FlagError> {
        self.value
            .parse()
            .ok()
            .filter(|seconds| *seconds <= go_duration::MAX.as_secs())
            .ok_or_else(|| FlagError::BadSeconds {
                flag: self.name.clone(),
                value: echo(&self.value),
            })
    }

    /// The flag as CA runs it at `speed`; `speed` must be finite and > 0 (1 otherwise).
    pub fn at_speed(&self, speed: f64) -> RunFlag {
        let speed = if speed.is_finite() && speed > 0.0 {
            speed
        } else {
            1.0
        };
        let as_run = |value: String, floored: bool| RunFlag {
            given: self.clone(),
            as_run: Self {
                name: self.name.clone(),
                value,
            },
            floored,
        };
        if speed == 1.0 {
            return as_run(self.value.clone(), false);
        }
        if let Some((_, floor)) = DILATED_DURATIONS.iter().find(|(n, _)| *n == self.name) {
            let Ok(given) = go_duration::parse(&self.value) else {
                // Checked when parsed; a hand-built flag keeps its value.
                return as_run(self.value.clone(), false);
            };
            if given.is_zero() {
                return as_run(self.value.clone(), false);
            }
            // Below 1x a duration grows: it stops at Go's longest, which CA still takes.
            let scaled = Duration::try_from_secs_f64(given.as_secs_f64() / speed)
                .map_or(go_duration::MAX, |scaled| scaled.min(go_duration::MAX));
            return as_run(go_duration::format(scaled.max(*floor)), scaled < *floor);
        }
        if DILATED_SECONDS.contains(&self.name.as_str())
            && let Ok(given) = self.seconds()
            && given > 0
        {
            let scaled =
                ((given as f64 / speed).ceil().max(1.0) as u64).min(go_duration::MAX.as_secs());
            return as_run(scaled.to_string(), false);
        }
        if DILATED_RATES.contains(&self.name.as_str())
            && let Ok(given) = self.rate()
        {
            let scaled = (given * speed).min(f64::from(f32::MAX));
            return as_run(format_rate(scaled), false);
        }
        as_run(self.value.clone(), false)
    }
}

/// `error` with the text it repeats bounded.
fn bounded(error: DurationError) -> DurationError {
    match error {
        DurationError::Invalid(text) => DurationError::Invalid(echo(&text)),
        DurationError::Negative(text) => DurationError::Negative(echo(&text)),
        DurationError::TooLong(text) => DurationError::TooLong(echo(&text)),
    }
}

/// A rate as Go's strconv would take it back: `200`, `12.5`, `0.125`.
fn format_rate(rate: f64) -> String {
    let rounded = (rate * 1000.0).round() / 1000.0;
    if rounded > 0.0 {
        rounded.to_string()
    } else {
        rate.to_string()
    }
}

/// Every flag whose value the speed changes: divided (durations) or multiplied (rates).
pub fn dilated_flags() -> impl Iterator<Item = &'static str> {
    DILATED_DURATIONS
        .iter()
        .map(|(name, _)| *name)
        .chain(DILATED_SECONDS)
        .chain(DILATED_RATES)
}

fn is_dilated_duration(name: &str) -> bool {
    DILATED_DURATIONS.iter().any(|(n, _)| *n == name)
}

/// A flag as given and as run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFlag {
    pub given: AutoscalerFlag,
    pub as_run: AutoscalerFlag,
    /// The divided value was below the flag's floor, which it runs at instead.
    pub floored: bool,
}

impl RunFlag {
    /// Whether the speed changed the value.
    pub fn dilated(&self) -> bool {
        self.given.value != self.as_run.value
    }
}

/// Flags in the order given; CA takes the last of a repeated scalar flag, as it would here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoscalerFlags {
    pub flags: Vec<AutoscalerFlag>,
}

impl AutoscalerFlags {
    /// Each text as `FLAG=VALUE`; the first that cannot be taken is the error.
    pub fn parse<S: AsRef<str>>(texts: &[S]) -> Result<Self, FlagError> {
        let flags = texts
            .iter()
            .map(|text| text.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(Self { flags })
    }

    /// Every flag is one of `known` (the flag names the real binary lists in its `--help`).
    pub fn check_known(&self, known: &BTreeSet<String>) -> Result<(), FlagError> {
        match self.flags.iter().find(|flag| !known.contains(&flag.name)) {
            Some(flag) => Err(FlagError::Unknown(flag.name.clone())),
            None => Ok(()),
        }
    }

    /// Every flag as CA runs it at `speed`.
    pub fn at_speed(&self, speed: f64) -> Vec<RunFlag> {
        self.flags.iter().map(|flag| flag.at_speed(speed)).collect()
    }

    /// `base` with these flags over it: each flag here replaces `base`'s flags of that name
    /// (all of them), and is added after the rest.
    pub fn over(&self, base: &Self) -> Self {
        let names: BTreeSet<&str> = self.flags.iter().map(|f| f.name.as_str()).collect();
        let flags = base
            .flags
            .iter()
            .filter(|flag| !names.contains(flag.name.as_str()))
            .chain(&self.flags)
            .cloned()
            .collect();
        Self { flags }
    }
}

/// The default value of each flag that has one in a `cluster-autoscaler --help` output (pflag's
/// `(default 5s)` at the end of a flag's line): a duration flag the user leaves alone still
/// measures simulated time, so at a speed it must be divided like a given one.
pub fn defaults_in_help(help: &str) -> BTreeMap<String, String> {
    help.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("--").or_else(|| {
                let (short, long) = line.split_once(", --")?;
                (short.starts_with('-') && short.len() == 2).then_some(long)
            })?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            let default = line.strip_suffix(')')?.rsplit_once("(default ")?.1;
            (!name.is_empty()).then(|| (name, default.trim_matches('"').to_owned()))
        })
        .collect()
}

/// Where the value of a flag CA runs with comes from, lowest layer first: each layer's flags
/// replace those of the same name below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FlagSource {
    /// The binary's own default, as its `--help` says.
    CaDefault,
    /// The recorded cluster's CA (its Deployment in the trace, or a file of its flags).
    Recording,
    /// The environment's own flags (`ksim up --autoscaler-flag`).
    Environment,
    /// The configuration under test (`--autoscaler-arg`, an experiment variant).
    Run,
}

impl FlagSource {
    /// The word the report uses.
    pub fn word(self) -> &'static str {
        match self {
            Self::CaDefault => "ca-default",
            Self::Recording => "recording",
            Self::Environment => "environment",
            Self::Run => "run",
        }
    }
}

/// The flags over CA's defaults, lowest first: the environment's, then the recording's, then
/// the run's. The recording sits over the environment because it says how this trace's cluster
/// ran; the run's flags are the what-if.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlagLayers {
    pub environment: AutoscalerFlags,
    pub recording: AutoscalerFlags,
    pub run: AutoscalerFlags,
}

impl FlagLayers {
    /// Every layer merged, each flag with the layer its value came from, in CA's order.
    fn merged(&self) -> Vec<(AutoscalerFlag, FlagSource)> {
        let layers = [
            (&self.environment, FlagSource::Environment),
            (&self.recording, FlagSource::Recording),
            (&self.run, FlagSource::Run),
        ];
        let mut merged: Vec<(AutoscalerFlag, FlagSource)> = Vec::new();
        for (flags, source) in layers {
            let names: BTreeSet<&str> = flags.flags.iter().map(|f| f.name.as_str()).collect();
            merged.retain(|(flag, _)| !names.contains(flag.name.as_str()));
            merged.extend(flags.flags.iter().map(|flag| (flag.clone(), source)));
        }
        merged
    }
}

/// Every flag CA runs with at `speed` that a configuration may set: the `layers` (see
/// [`FlagLayers`]), then the binary's own defaults (`binary_defaults`, see [`defaults_in_help`])
/// of the flags no layer sets: each dilated flag (passed when the speed changes it) and each
/// flag a run may set, so the report says what CA ran with even where nobody chose.
pub fn run_flags(
    layers: &FlagLayers,
    binary_defaults: &BTreeMap<String, String>,
    speed: f64,
) -> Vec<(RunFlag, FlagSource)> {
    let mut flags: Vec<(RunFlag, FlagSource)> = layers
        .merged()
        .into_iter()
        .map(|(flag, source)| (flag.at_speed(speed), source))
        .collect();
    let set: BTreeSet<String> = flags.iter().map(|(f, _)| f.given.name.clone()).collect();
    let defaults = dilated_flags()
        .chain(policy::ALLOWED.iter().copied())
        .filter(|name| !set.contains(*name))
        .collect::<BTreeSet<_>>();
    for name in defaults {
        let Some(value) = binary_defaults.get(name) else {
            continue;
        };
        let flag = AutoscalerFlag {
            name: name.to_owned(),
            value: value.clone(),
        };
        // A default that does not parse is left to the binary and not listed.
        if flag.check_value().is_ok() {
            flags.push((flag.at_speed(speed), FlagSource::CaDefault));
        }
    }
    flags
}

/// A flag ksim runs CA with where production would not, for the simulation to work; CA's
/// connection flags (cloud provider, kubeconfig, address) aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulationFlag {
    pub name: &'static str,
    pub value: &'static str,
    pub reason: &'static str,
}

/// Every flag ksim sets differently from production; none of them a run may set.
pub const SIMULATION_FLAGS: &[SimulationFlag] = &[SimulationFlag {
    name: "leader-elect",
    value: "false",
    reason: "one CA runs per environment; one restarted after a crash or for a run's \
             configuration must act at once, not wait out the dead one's lease",
}];

/// The flag names a `cluster-autoscaler --help` output lists (Go's pflag layout: lines
/// starting with `--name`, or `-v, --name` for a flag with a shorthand), dotted ones
/// (`ginkgo.dry-run`) whole.
pub fn flags_in_help(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            line.strip_prefix("--").or_else(|| {
                let (short, long) = line.split_once(", --")?;
                (short.starts_with('-') && short.len() == 2).then_some(long)
            })
        })
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn flag(text: &str) -> AutoscalerFlag {
        text.parse().unwrap()
    }

    #[test]
    fn a_flag_is_flag_equals_value_with_or_without_dashes() {
        assert_eq!(
            flag("--expander=price"),
            AutoscalerFlag {
                name: "expander".into(),
                value: "price".into()
            }
        );
        assert_eq!(
            flag("expander=least-waste").to_string(),
            "--expander=least-waste"
        );
        assert_eq!(flag("cores-total=0:64").value, "0:64");
        for bad in ["expander", "=price", "--Expander=x", "scale down=1", "-v=2"] {
            assert!(
                matches!(
                    bad.parse::<AutoscalerFlag>(),
                    Err(FlagError::NotFlagValue(_))
                ),
                "{bad}"
            );
        }
        let error = "scale-down-unneeded-time=ten"
            .parse::<AutoscalerFlag>()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "cluster-autoscaler flag --scale-down-unneeded-time: \"ten\" is not a duration (e.g. \
             10m, 1h30m, 1.5s, 300ms)"
        );
        assert!(matches!(
            "max-graceful-termination-sec=1m".parse::<AutoscalerFlag>(),
            Err(FlagError::BadSeconds { .. })
        ));
    }

    #[test]
    fn a_run_sets_only_allowed_flags_and_a_refused_one_is_named_with_why() {
        for (text, family) in [
            ("log-file=/etc/cron.d/x", policy::Family::Logging),
            ("--log_file=/tmp/x", policy::Family::Logging),
            ("log-dir=/etc", policy::Family::Logging),
            ("logtostderr=false", policy::Family::Logging),
            (
                "kubernetes=https://elsewhere:6443",
                policy::Family::Connection,
            ),
            ("grpc-expander-url=evil:443", policy::Family::Connection),
            ("address=0.0.0.0:8085", policy::Family::Connection),
            ("cloud-config=/etc/x", policy::Family::Files),
            ("leader-elect=true", policy::Family::Identity),
            ("nodes=0:5:a", policy::Family::Provider),
            ("profiling=true", policy::Family::Diagnostics),
        ] {
            let error = text.parse::<AutoscalerFlag>().unwrap_err();
            let FlagError::Refused { flag, family: got } = &error else {
                panic!("{text}: {error}");
            };
            assert_eq!(*got, family, "{text}");
            assert!(
                error.to_string().starts_with(&format!(
                    "--{flag} is not a flag a run may set ({family}): it "
                )),
                "{error}"
            );
        }
        assert_eq!(
            "log-file=/tmp/x"
                .parse::<AutoscalerFlag>()
                .unwrap_err()
                .to_string(),
            "--log-file is not a flag a run may set (logging): it changes where or how CA logs; \
             the environment keeps its log"
        );
        // Neither list: refused until someone decides, with the allowed flag it resembles.
        let typo = "scale-down-unneded-time=2m"
            .parse::<AutoscalerFlag>()
            .unwrap_err();
        assert_eq!(
            typo.to_string(),
            "--scale-down-unneded-time is not a flag a run may set: only the cluster-autoscaler \
             flags that change its decisions are (did you mean --scale-down-unneeded-time?)"
        );
        assert!(matches!(
            "some-new-flag=1".parse::<AutoscalerFlag>(),
            Err(FlagError::NotAllowed {
                suggestion: None,
                ..
            })
        ));
        for text in [
            "expander=price",
            "scale-down-unneeded-time=2m",
            "max-nodes-total=10",
            "balance-similar-node-groups=true",
            "v=4",
        ] {
            assert!(text.parse::<AutoscalerFlag>().is_ok(), "{text}");
        }
        // The environment's own flags are taken as they are.
        assert_eq!(
            AutoscalerFlag::of_environment("--kubeconfig=/k")
                .unwrap()
                .to_string(),
            "--kubeconfig=/k"
        );
    }

    #[test]
    fn durations_in_simulated_time_are_divided_by_the_speed() {
        let run = flag("scale-down-unneeded-time=2m").at_speed(10.0);
        assert_eq!(run.as_run.to_string(), "--scale-down-unneeded-time=12s");
        assert_eq!(run.given.value, "2m");
        assert!(run.dilated() && !run.floored);
        assert_eq!(
            flag("scale-down-unneeded-time=10m")
                .at_speed(10.0)
                .as_run
                .value,
            "1m"
        );
        assert_eq!(
            flag("max-node-provision-time=15m")
                .at_speed(4.0)
                .as_run
                .value,
            "3m45s"
        );
        assert_eq!(
            flag("max-graceful-termination-sec=600")
                .at_speed(7.0)
                .as_run
                .value,
            "86"
        );
        // Zero stays zero; 1x changes nothing.
        assert_eq!(
            flag("new-pod-scale-up-delay=0s")
                .at_speed(10.0)
                .as_run
                .value,
            "0s"
        );
        assert!(!flag("scan-interval=10s").at_speed(1.0).dilated());
    }

    #[test]
    fn below_1x_a_duration_stops_at_gos_longest() {
        let run = flag("node-group-backoff-reset-timeout=2000000h").at_speed(0.001);
        assert_eq!(run.as_run.value, go_duration::format(go_duration::MAX));
        assert!(go_duration::parse(&run.as_run.value).is_ok());
        let run = flag("max-graceful-termination-sec=9000000000").at_speed(0.001);
        assert_eq!(run.as_run.value, go_duration::MAX.as_secs().to_string());
        assert!(matches!(
            "max-graceful-termination-sec=9223372037".parse::<AutoscalerFlag>(),
            Err(FlagError::BadSeconds { .. })
        ));
        assert!(matches!(
            "scale-down-unneeded-time=3000000h".parse::<AutoscalerFlag>(),
            Err(FlagError::BadDuration { .. })
        ));
    }

    #[test]
    fn rates_in_simulated_time_are_multiplied_by_the_speed() {
        let run = flag("kube-client-qps=5").at_speed(40.0);
        assert_eq!(run.as_run.to_string(), "--kube-client-qps=200");
        assert!(run.dilated() && !run.floored);
        assert_eq!(flag("kube-client-qps=5").at_speed(0.4).as_run.value, "2");
        assert_eq!(
            flag("kube-client-qps=0.1").at_speed(3.0).as_run.value,
            "0.3"
        );
        assert!(!flag("kube-client-qps=5").at_speed(1.0).dilated());
        // The burst is a number of requests, not a rate.
        assert!(!flag("kube-client-burst=10").at_speed(40.0).dilated());
        for bad in ["0", "-5", "fast", "NaN", "inf", "1e40"] {
            assert!(
                matches!(
                    format!("kube-client-qps={bad}").parse::<AutoscalerFlag>(),
                    Err(FlagError::BadRate { .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            "kube-client-qps=0"
                .parse::<AutoscalerFlag>()
                .unwrap_err()
                .to_string(),
            "cluster-autoscaler flag --kube-client-qps: \"0\" is not a rate above 0 (e.g. 5 or 12.5)"
        );
    }

    #[test]
    fn the_scan_interval_stops_at_its_floor() {
        let run = flag("scan-interval=1s").at_speed(100.0);
        assert_eq!(run.as_run.value, "100ms");
        assert!(run.floored);
        assert_eq!(flag("scan-interval=10s").at_speed(10.0).as_run.value, "1s");
    }

    #[test]
    fn computation_budgets_and_other_flags_are_not_dilated() {
        for text in [
            "max-binpacking-time=5m",
            "scale-down-simulation-timeout=30s",
            "expander=price",
            "scale-down-utilization-threshold=0.5",
        ] {
            let run = flag(text).at_speed(10.0);
            assert!(!run.dilated(), "{text} became {}", run.as_run);
        }
        let watchdog = AutoscalerFlag::of_environment("max-inactivity=10m").unwrap();
        assert!(!watchdog.at_speed(10.0).dilated());
    }

    #[test]
    fn given_flags_replace_the_base_ones_of_their_name() {
        let base =
            AutoscalerFlags::parse(&["scan-interval=1s", "startup-taint=a", "startup-taint=b"])
                .unwrap();
        let given = AutoscalerFlags::parse(&["--startup-taint=c", "expander=price"]).unwrap();
        let merged: Vec<String> = given
            .over(&base)
            .flags
            .iter()
            .map(|f| f.to_string())
            .collect();
        assert_eq!(
            merged,
            [
                "--scan-interval=1s",
                "--startup-taint=c",
                "--expander=price"
            ]
        );
    }

    #[test]
    fn allowed_flags_this_release_lacks_are_named() {
        let help = "Usage of cluster-autoscaler:\n      --expander string   Type of node group \
                    expander\n      --scan-interval duration   How often\n  -v, --v Level  \
                    number\n      --ginkgo.dry-run   If set\n";
        let known = flags_in_help(help);
        assert_eq!(
            known.iter().map(String::as_str).collect::<Vec<_>>(),
            ["expander", "ginkgo.dry-run", "scan-interval", "v"]
        );
        // Allowed, but this release (say 1.34) does not have it.
        let flags =
            AutoscalerFlags::parse(&["expander=price", "max-node-startup-time=1m"]).unwrap();
        assert_eq!(
            flags.check_known(&known),
            Err(FlagError::Unknown("max-node-startup-time".into()))
        );
        assert_eq!(
            FlagError::Unknown("max-node-startup-time".into()).to_string(),
            "cluster-autoscaler has no flag --max-node-startup-time (see cluster-autoscaler --help)"
        );
    }
    const HELP: &str = "\
      --node-delete-delay-after-taint duration     How long to wait before deleting a node after tainting it (default 5s)
      --scan-interval duration                      How often cluster is reevaluated for scale up or down (default 10s)
      --max-graceful-termination-sec int            Maximum number of seconds CA waits (default 600)
      --kube-client-qps float                       QPS value for kubernetes client. (default 5)
      --expander string                             Type of node group expander (default \"random\")
      --new-pod-scale-up-delay duration             Pods less than this old will not be considered for scale-up.
  -v, --v Level                                     number for the log level verbosity (default 4)
";

    #[test]
    fn defaults_are_read_from_the_help() {
        let defaults = defaults_in_help(HELP);
        assert_eq!(defaults["node-delete-delay-after-taint"], "5s");
        assert_eq!(defaults["max-graceful-termination-sec"], "600");
        assert_eq!(defaults["expander"], "random");
        assert_eq!(defaults["v"], "4");
        assert!(!defaults.contains_key("new-pod-scale-up-delay"));
    }

    #[test]
    fn the_binarys_own_defaults_are_listed_and_the_dilated_ones_run_divided() {
        let defaults = defaults_in_help(HELP);
        let layers = FlagLayers {
            environment: AutoscalerFlags::parse(&["scan-interval=1s"]).unwrap(),
            run: AutoscalerFlags::parse(&["scale-down-unneeded-time=2m"]).unwrap(),
            ..FlagLayers::default()
        };
        let run = run_flags(&layers, &defaults, 10.0);
        let find = |name: &str| {
            run.iter()
                .find(|(flag, _)| flag.given.name == name)
                .map(|(flag, source)| (flag.as_run.value.as_str(), *source))
        };
        assert_eq!(
            find("scan-interval"),
            Some(("100ms", FlagSource::Environment))
        );
        assert_eq!(
            find("scale-down-unneeded-time"),
            Some(("12s", FlagSource::Run))
        );
        assert_eq!(
            find("node-delete-delay-after-taint"),
            Some(("500ms", FlagSource::CaDefault))
        );
        assert_eq!(
            find("max-graceful-termination-sec"),
            Some(("60", FlagSource::CaDefault))
        );
        assert_eq!(find("kube-client-qps"), Some(("50", FlagSource::CaDefault)));
        // Not dilated: listed as CA's default, unchanged.
        assert_eq!(find("expander"), Some(("random", FlagSource::CaDefault)));
        // No default in the help: not listed.
        assert_eq!(find("new-pod-scale-up-delay"), None);
        // At 1x every CA default runs as it is.
        let at_1x = run_flags(&layers, &defaults, 1.0);
        assert!(
            at_1x
                .iter()
                .filter(|(_, source)| *source == FlagSource::CaDefault)
                .all(|(flag, _)| !flag.dilated())
        );
    }

    #[test]
    fn each_layer_replaces_the_flags_below_it_and_says_so() {
        let defaults = defaults_in_help(HELP);
        let layers = FlagLayers {
            environment: AutoscalerFlags::parse(&["scan-interval=1s", "expander=least-waste"])
                .unwrap(),
            recording: AutoscalerFlags::parse(&["scan-interval=10s", "max-nodes-total=40"])
                .unwrap(),
            run: AutoscalerFlags::parse(&["max-nodes-total=20"]).unwrap(),
        };
        let run = run_flags(&layers, &defaults, 1.0);
        let listed: Vec<(String, &str)> = run
            .iter()
            .map(|(flag, source)| (flag.given.to_string(), source.word()))
            .collect();
        let expected = [
            ("--expander=least-waste", "environment"),
            ("--scan-interval=10s", "recording"),
            ("--max-nodes-total=20", "run"),
            ("--node-delete-delay-after-taint=5s", "ca-default"),
            ("--max-graceful-termination-sec=600", "ca-default"),
        ];
        for (flag, source) in expected {
            assert!(
                listed.contains(&(flag.to_owned(), source)),
                "{flag} from {source} in {listed:?}"
            );
        }
        // One entry per flag: the layer on top.
        for name in ["scan-interval", "max-nodes-total", "expander"] {
            assert_eq!(
                run.iter().filter(|(f, _)| f.given.name == name).count(),
                1,
                "{name}"
            );
        }
    }

    /// Issue 53, finding 2: values went to CA unchecked, and it failed with "Internal error".
    #[test]
    fn each_kind_of_bad_value_is_refused_by_the_flags_type() {
        for text in [
            "expander=garbage",
            "expander=price,garbage",
            "expander=",
            "max-nodes-total=-5",
            "max-nodes-total=ten",
            "scale-down-utilization-threshold=NaN",
            "scale-down-utilization-threshold=1.5",
            "scale-down-utilization-threshold=-0.1",
            "scale-down-gpu-utilization-threshold=inf",
            "max-total-unready-percentage=101",
            "max-node-provision-time=15 minutes",
            "scale-down-delay-after-add=-1m",
            "balance-similar-node-groups=yes",
            "estimator=magic",
            "cores-total=10:2",
            "memory-total=-1:5",
            "gpu-total=nvidia:1",
            "predicate-parallelism=0",
            "kube-client-burst=0",
            "v=-1",
            "feature-gates=Foo",
            "feature-gates=Foo=maybe",
        ] {
            let error = text.parse::<AutoscalerFlag>().unwrap_err();
            let (name, _) = text.split_once('=').unwrap();
            assert!(
                error.to_string().contains(&format!("--{name}")),
                "{text}: {error}"
            );
        }
        assert_eq!(
            "expander=garbage"
                .parse::<AutoscalerFlag>()
                .unwrap_err()
                .to_string(),
            "cluster-autoscaler flag --expander: \"garbage\" is not a comma-separated list of \
             random, most-pods, least-waste, price, priority, grpc"
        );
        assert_eq!(
            "scale-down-utilization-threshold=NaN"
                .parse::<AutoscalerFlag>()
                .unwrap_err()
                .to_string(),
            "cluster-autoscaler flag --scale-down-utilization-threshold: \"NaN\" is not a \
             number from 0 to 1"
        );
        // The value echoed is bounded.
        let long = format!("expander={}", "x".repeat(4000));
        let message = long.parse::<AutoscalerFlag>().unwrap_err().to_string();
        assert!(
            message.len() < 300 && message.contains("... (4000 bytes)"),
            "{message}"
        );
    }

    #[test]
    fn good_values_of_each_kind_are_taken() {
        for text in [
            "expander=priority,least-waste",
            "expander=random",
            "max-nodes-total=0",
            "scale-down-utilization-threshold=0",
            "scale-down-utilization-threshold=1",
            "scale-down-utilization-threshold=0.65",
            "max-total-unready-percentage=45",
            "memory-difference-ratio=0.015",
            "max-node-provision-time=15m",
            "scale-down-delay-after-add=0",
            "balance-similar-node-groups=true",
            "scale-up-from-zero=False",
            "skip-nodes-with-local-storage=0",
            "estimator=binpacking",
            "cores-total=0:320000",
            "gpu-total=nvidia-tesla-k80:0:4",
            "expendable-pods-priority-cutoff=-10",
            "feature-gates=DynamicResourceAllocation=true,Foo=false",
            "startup-taint=ignore-me",
            "drain-priority-config=",
            "v=4",
        ] {
            assert!(text.parse::<AutoscalerFlag>().is_ok(), "{text}");
        }
    }

    /// Issue 53, finding 2: a 100,000-character flag name cost 11 s of CPU, and every error
    /// echoed the flag whole.
    #[test]
    fn an_oversized_flag_is_refused_at_once_with_a_bounded_message() {
        // Refused by its length, before anything parses it (the cost was the parse's).
        for text in [
            format!("{}=1", "a".repeat(100_000)),
            format!("--{}", "a".repeat(100_000)),
            format!("expander={}", "x".repeat(100_000)),
            format!("{}=1", "a".repeat(129)),
        ] {
            let error = text.parse::<AutoscalerFlag>().unwrap_err();
            assert!(matches!(error, FlagError::TooLong { .. }), "{error}");
            assert!(error.to_string().len() < 300, "{error}");
            let error = AutoscalerFlag::of_environment(&text).unwrap_err();
            assert!(matches!(error, FlagError::TooLong { .. }), "{error}");
            assert!(error.to_string().len() < 300, "{error}");
        }
        assert!(
            format!("{}=1", "a".repeat(128))
                .parse::<AutoscalerFlag>()
                .is_err()
        );
    }

    #[test]
    fn no_simulation_flag_is_one_a_run_may_set() {
        for flag in SIMULATION_FLAGS {
            assert!(!policy::allowed(flag.name), "{}", flag.name);
            assert!(policy::refused(flag.name).is_some(), "{}", flag.name);
        }
    }
}
