//! A node group's size limits, read from its Deployment's annotations.

use std::collections::BTreeMap;

use thiserror::Error;

pub use ksim_nodes::labels::{MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeLimits {
    pub min: i32,
    pub max: i32,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LimitsError {
    #[error("annotation {key}={value:?} is not a non-negative integer")]
    NotACount { key: &'static str, value: String },
    #[error("annotation {MIN_SIZE_ANNOTATION}={min} is above {MAX_SIZE_ANNOTATION}={max}")]
    MinAboveMax { min: i32, max: i32 },
}

impl SizeLimits {
    /// Limits from a Deployment's annotations; absent ones default to 0 and `default_max`.
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
        default_max: i32,
    ) -> Result<Self, LimitsError> {
        let min = count(annotations, MIN_SIZE_ANNOTATION)?.unwrap_or(0);
        let max = count(annotations, MAX_SIZE_ANNOTATION)?.unwrap_or(default_max);
        if min > max {
            return Err(LimitsError::MinAboveMax { min, max });
        }
        Ok(Self { min, max })
    }
}

fn count(
    annotations: &BTreeMap<String, String>,
    key: &'static str,
) -> Result<Option<i32>, LimitsError> {
    let Some(value) = annotations.get(key) else {
        return Ok(None);
    };
    match value.trim().parse::<i32>() {
        Ok(n) if n >= 0 => Ok(Some(n)),
        _ => Err(LimitsError::NotACount {
            key,
            value: value.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn absent_annotations_give_zero_and_the_default_max() {
        assert_eq!(
            SizeLimits::from_annotations(&annotations(&[]), 50),
            Ok(SizeLimits { min: 0, max: 50 })
        );
    }

    #[test]
    fn both_annotations_are_read() {
        let a = annotations(&[(MIN_SIZE_ANNOTATION, "2"), (MAX_SIZE_ANNOTATION, "7")]);
        assert_eq!(
            SizeLimits::from_annotations(&a, 50),
            Ok(SizeLimits { min: 2, max: 7 })
        );
    }

    #[test]
    fn malformed_or_negative_counts_name_the_annotation() {
        for bad in ["-1", "ten", "", "2.5", "99999999999"] {
            let err = SizeLimits::from_annotations(&annotations(&[(MAX_SIZE_ANNOTATION, bad)]), 5)
                .unwrap_err();
            assert_eq!(
                err,
                LimitsError::NotACount {
                    key: MAX_SIZE_ANNOTATION,
                    value: bad.to_owned()
                }
            );
            assert!(err.to_string().contains(MAX_SIZE_ANNOTATION));
        }
    }

    #[test]
    fn min_above_max_is_refused() {
        let a = annotations(&[(MIN_SIZE_ANNOTATION, "5"), (MAX_SIZE_ANNOTATION, "3")]);
        assert_eq!(
            SizeLimits::from_annotations(&a, 50),
            Err(LimitsError::MinAboveMax { min: 5, max: 3 })
        );
    }
}
