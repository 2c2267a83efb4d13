//! Go's duration syntax, as cluster-autoscaler's duration flags parse it (`time.ParseDuration`):
//! an optional sign, then decimal numbers each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`,
//! `h`), e.g. `1h30m`, `1.5s`, `300ms`; `0` alone needs no unit.

use std::time::Duration;

/// Why a text is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?} is not a duration (e.g. 10m, 1h30m, 1.5s, 300ms)")]
    Invalid(String),
    #[error("{0:?} is negative: a duration flag must not be")]
    Negative(String),
    #[error("{0:?} is longer than Go's longest duration (2562047h47m16s)")]
    TooLong(String),
}

/// Go's longest duration (`math.MaxInt64` nanoseconds): CA refuses a longer flag, and a
/// duration divided by a speed below 1 stops here.
pub const MAX: Duration = Duration::new(9_223_372_036, 854_775_807);

const UNITS: [(&str, f64); 8] = [
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("μs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
];

/// Parses `text`; a negative duration is an error, since no CA duration flag means one.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(text.to_owned());
    let rest = match text.strip_prefix('-') {
        Some(_) => return Err(DurationError::Negative(text.to_owned())),
        None => text.strip_prefix('+').unwrap_or(text),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut seconds = 0.0;
    let mut rest = rest;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let (_, scale) = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .ok_or_else(invalid)?;
        seconds += number * scale;
        rest = &rest[unit_len..];
    }
    let duration = Duration::try_from_secs_f64(seconds).map_err(|_| invalid())?;
    if duration > MAX {
        return Err(DurationError::TooLong(text.to_owned()));
    }
    Ok(duration)
}

/// The shortest Go text for `duration` to the millisecond: `12s`, `1m30s`, `1.5s`, `250ms`.
pub fn format(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (hours, minutes) = (ms / 3_600_000, ms / 60_000 % 60);
    let seconds_ms = ms % 60_000;
    let mut text = String::new();
    if hours > 0 {
        text.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        text.push_str(&format!("{minutes}m"));
    }
    if seconds_ms > 0 {
        let (whole, fraction) = (seconds_ms / 1000, seconds_ms % 1000);
        if fraction == 0 {
            text.push_str(&format!("{whole}s"));
        } else {
            let digits = format!("{fraction:03}");
            text.push_str(&format!("{whole}.{}s", digits.trim_end_matches('0')));
        }
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_go_parses() {
        let secs = |s: f64| Duration::from_secs_f64(s);
        assert_eq!(parse("10m").unwrap(), secs(600.0));
        assert_eq!(parse("1h30m").unwrap(), secs(5400.0));
        assert_eq!(parse("1.5s").unwrap(), secs(1.5));
        assert_eq!(parse("300ms").unwrap(), secs(0.3));
        assert_eq!(parse("2h45m30.5s").unwrap(), secs(9930.5));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse("+5s").unwrap(), secs(5.0));
        assert_eq!(parse("10µs").unwrap(), Duration::from_micros(10));
    }

    #[test]
    fn refuses_what_go_refuses() {
        for bad in ["", "10", "5x", "m", "1..5s", "10 m", "1h-2m"] {
            assert!(
                matches!(parse(bad), Err(DurationError::Invalid(_))),
                "{bad:?} parsed"
            );
        }
        assert_eq!(parse("-1s"), Err(DurationError::Negative("-1s".to_owned())));
        // Go's int64 nanoseconds end at 2562047h47m16.854775807s.
        assert!(parse("2562047h").is_ok());
        assert_eq!(
            parse("2562048h"),
            Err(DurationError::TooLong("2562048h".to_owned()))
        );
        assert!(matches!(parse("1e400h"), Err(DurationError::Invalid(_))));
    }

    #[test]
    fn formats_the_shortest_go_text() {
        let ms = Duration::from_millis;
        assert_eq!(format(ms(12_000)), "12s");
        assert_eq!(format(ms(90_000)), "1m30s");
        assert_eq!(format(ms(1_500)), "1.5s");
        assert_eq!(format(ms(250)), "250ms");
        assert_eq!(format(ms(3_600_000)), "1h");
        assert_eq!(format(ms(3_725_050)), "1h2m5.05s");
        assert_eq!(format(Duration::ZERO), "0s");
        for text in ["12s", "1m30s", "1.5s", "250ms", "1h2m5.05s"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
    }
}
