//! Kubernetes quantities (`500m`, `16Gi`, `1e3`) as skeletons, slices and pods write them:
//! whether a text is one, and about how much it stands for.

/// The amount a valid quantity stands for (cpu in cores, memory in bytes); `None` if `s` is
/// not a Kubernetes quantity. Approximate (f64), which is all range checks need.
pub fn quantity_value(s: &str) -> Option<f64> {
    if !is_valid_quantity(s) {
        return None;
    }
    let number_end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(s.len(), |(i, _)| i);
    let (number, suffix) = s.split_at(number_end);
    // "5." and ".5" are valid quantities; Rust's float parser takes both too.
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024_f64,
        "Mi" => 1024_f64.powi(2),
        "Gi" => 1024_f64.powi(3),
        "Ti" => 1024_f64.powi(4),
        "Pi" => 1024_f64.powi(5),
        "Ei" => 1024_f64.powi(6),
        exponent => 10_f64.powf(exponent[1..].parse::<f64>().ok()?),
    };
    Some(number * factor)
}

/// Whether `s` follows the Kubernetes quantity grammar: an optionally signed decimal number with
/// at least one digit and at most one point, then nothing, a binary SI suffix (`Ki`..`Ei`), a
/// decimal SI suffix (`n u m k M G T P E`) or a decimal exponent (`e`/`E`, optional sign, digits).
pub fn is_valid_quantity(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_len = unsigned
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let digit_count = number.chars().filter(char::is_ascii_digit).count();
    let point_count = number.len() - digit_count;
    if digit_count == 0 || point_count > 1 {
        return false;
    }
    is_valid_quantity_suffix(suffix)
}

fn is_valid_quantity_suffix(suffix: &str) -> bool {
    const BINARY_SI: &[&str] = &["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    const DECIMAL_SI: &[&str] = &["", "n", "u", "m", "k", "M", "G", "T", "P", "E"];
    if BINARY_SI.contains(&suffix) || DECIMAL_SI.contains(&suffix) {
        return true;
    }
    let Some(exponent) = suffix.strip_prefix(['e', 'E']) else {
        return false;
    };
    let exponent_digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    !exponent_digits.is_empty() && exponent_digits.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantity_values_follow_the_suffixes() {
        for (quantity, value) in [
            ("250m", 0.25),
            ("1.5", 1.5),
            (".5", 0.5),
            ("5.", 5.0),
            ("-1", -1.0),
            ("+2k", 2000.0),
            ("1Ki", 1024.0),
            ("2Gi", 2.0 * 1024.0 * 1024.0 * 1024.0),
            ("1e3", 1000.0),
            ("1.5e-3", 0.0015),
            ("3E", 3e18),
        ] {
            let got = quantity_value(quantity).unwrap();
            assert!(
                (got - value).abs() <= value.abs() * 1e-12,
                "{quantity}: {got}"
            );
        }
        assert_eq!(quantity_value("10Mb"), None);
    }

    #[test]
    fn quantity_grammar_accepts_kubernetes_forms() {
        for valid in [
            "0",
            "1",
            "100",
            "1.5",
            ".5",
            "5.",
            "+1",
            "-1",
            "250m",
            "100n",
            "3u",
            "1k",
            "2M",
            "4G",
            "1T",
            "1P",
            "1E",
            "128Ki",
            "512Mi",
            "16Gi",
            "1Ti",
            "1Pi",
            "1Ei",
            "1e3",
            "1E3",
            "1e+3",
            "1e-3",
            "1.5e2",
            "7910360Ki",
            "76224326324",
        ] {
            assert!(is_valid_quantity(valid), "{valid:?} should be valid");
        }
    }

    #[test]
    fn quantity_grammar_rejects_malformed_values() {
        for invalid in [
            "", " ", " 1", "1 ", "1 Gi", ".", "-", "+", "1.2.3", "10Mb", "abc", "1KI", "1ki", "1K",
            "1Gib", "1e", "1e+", "1e1.5", "Gi", "1Gi1", "--1", "1,5", "0x10",
        ] {
            assert!(!is_valid_quantity(invalid), "{invalid:?} should be invalid");
        }
    }
}
