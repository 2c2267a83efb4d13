//! Noise told apart from effect: whether a figure's difference between a variant and the
//! baseline is beyond what repeats of the same configuration move it.
//!
//! Welch's t-test (two-sided; no assumption that the two variances are equal) on the figure's
//! values over each side's repeats, at a 95% confidence. Where it cannot tell, how many repeats
//! a side would need for a difference of the size observed to be told at that confidence with
//! an 80% chance (the normal approximation of the test's power).

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The confidence the comparison tells an effect at: a difference is beyond the noise when a
/// difference this large would come from noise alone less than 5% of the time.
pub const CONFIDENCE: f64 = 0.95;

/// z for a two-sided 95% test plus z for 80% power: (1.959964 + 0.841621)^2 times 2 is the
/// repeats per side, in units of variance over squared difference.
const REPEATS_FACTOR: f64 = 2.0 * 2.801_585 * 2.801_585;

/// What the test said of one figure of one variant against the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    /// The chance that noise alone makes a difference at least this large (Welch's t-test).
    pub p_value: f64,
    /// `p_value` below 1 - [`CONFIDENCE`].
    pub beyond_noise: bool,
    /// Where it is not beyond the noise but the means differ: the repeats each side would need
    /// to tell a difference of this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats_needed: Option<u32>,
}

/// `None` unless each side has at least two values: one run says nothing of its noise.
pub fn welch(baseline: &[f64], variant: &[f64]) -> Option<Noise> {
    let (n1, n2) = (baseline.len(), variant.len());
    if n1 < 2 || n2 < 2 {
        return None;
    }
    let (m1, v1) = mean_and_variance(baseline);
    let (m2, v2) = mean_and_variance(variant);
    let difference = m2 - m1;
    let (s1, s2) = (v1 / n1 as f64, v2 / n2 as f64);
    let standard_error = (s1 + s2).sqrt();
    let p_value = if standard_error == 0.0 {
        // Every repeat of each side gave the same value: any difference is not noise.
        if difference == 0.0 { 1.0 } else { 0.0 }
    } else {
        let t = difference / standard_error;
        // Welch-Satterthwaite degrees of freedom.
        let freedom =
            (s1 + s2).powi(2) / (s1.powi(2) / (n1 - 1) as f64 + s2.powi(2) / (n2 - 1) as f64);
        let distribution = StudentsT::new(0.0, 1.0, freedom).ok()?;
        2.0 * (1.0 - distribution.cdf(t.abs()))
    };
    let beyond_noise = p_value < 1.0 - CONFIDENCE;
    let pooled_variance = (v1 + v2) / 2.0;
    let repeats_needed = (!beyond_noise && difference != 0.0 && pooled_variance > 0.0).then(|| {
        let needed = (REPEATS_FACTOR * pooled_variance / difference.powi(2)).ceil();
        // At least one more than now, or it would have told already.
        (needed as u32).max(n1.max(n2) as u32 + 1)
    });
    Some(Noise {
        p_value,
        beyond_noise,
        repeats_needed,
    })
}

/// The mean and the sample variance (n - 1).
fn mean_and_variance(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_far_beyond_the_spread_of_repeats_is_beyond_noise() {
        let noise = welch(&[10.0, 10.5, 9.5], &[20.0, 20.5, 19.5]).unwrap();
        assert!(noise.beyond_noise, "{noise:?}");
        assert!(noise.p_value < 0.001, "{noise:?}");
        assert_eq!(noise.repeats_needed, None);
    }

    #[test]
    fn a_difference_inside_the_spread_is_within_noise_and_says_what_would_tell() {
        let noise = welch(&[10.0, 12.0, 8.0], &[11.0, 13.0, 9.0]).unwrap();
        assert!(!noise.beyond_noise, "{noise:?}");
        // t = 1 / sqrt(4/3 + 4/3) = 0.612 on 4 degrees of freedom: p = 0.573.
        assert!((noise.p_value - 0.573).abs() < 0.001, "{noise:?}");
        // Variance 4, difference 1: 2 * 2.8016^2 * 4 / 1 = 62.8 -> 63 repeats a side.
        assert_eq!(noise.repeats_needed, Some(63));
    }

    #[test]
    fn welchs_p_value_matches_one_computed_independently() {
        assert_eq!(
            welch(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]).unwrap().p_value,
            1.0
        );
        // Unequal variances. By hand: t = -2.0740, Welch-Satterthwaite df = 10.209, and the
        // two-sided p from mpmath's regularized incomplete beta, I(df/(df+t^2); df/2, 1/2),
        // is 0.06428: close, but not beyond the noise.
        let a = [19.8, 20.4, 19.6, 17.8, 18.5, 18.9, 18.3, 18.9, 19.5, 22.0];
        let b = [28.2, 26.6, 20.1, 23.3, 25.2, 22.1, 17.7, 27.6, 20.6, 13.7];
        let noise = welch(&a, &b).unwrap();
        assert!((noise.p_value - 0.06428).abs() < 0.00005, "{noise:?}");
        assert!(!noise.beyond_noise);
        assert!(noise.repeats_needed.is_some_and(|n| n > 10), "{noise:?}");
    }

    #[test]
    fn repeats_that_never_vary_tell_any_difference_and_one_run_tells_nothing() {
        assert!(welch(&[3.0, 3.0], &[4.0, 4.0]).unwrap().beyond_noise);
        let same = welch(&[3.0, 3.0], &[3.0, 3.0]).unwrap();
        assert!(!same.beyond_noise);
        assert_eq!(same.repeats_needed, None);
        assert_eq!(welch(&[3.0], &[4.0, 4.0]), None);
        assert_eq!(welch(&[3.0, 3.0], &[]), None);
    }
}
