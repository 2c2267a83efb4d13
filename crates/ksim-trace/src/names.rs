//! The values of a trace's objects the API server would refuse, as the trace tools check them
//! before a replay does: a namespace name that is not a DNS label, replicas beyond an int32.

/// Largest `spec.replicas` Kubernetes accepts: the field is an int32.
pub const MAX_REPLICAS: i64 = i32::MAX as i64;

/// Whether `name` is an RFC 1123 DNS label, as a namespace's name must be: 1 to 63 lowercase
/// letters, digits and '-', starting and ending with a letter or digit. `ksim_nodes::names`
/// has the same check; this crate does not depend on ksim-nodes (the trace format stays free of
/// Kubernetes types), and a test holds the two to the same answers.
pub fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(|b| alphanumeric(b) || *b == b'-')
        && bytes.first().is_some_and(alphanumeric)
        && bytes.last().is_some_and(alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_are_short_lowercase_alphanumerics_and_dashes() {
        for good in ["shop", "shop-canary", "a", "0", "9x", &"a".repeat(63)] {
            assert!(is_dns_label(good), "{good}");
            assert_eq!(is_dns_label(good), ksim_nodes::names::is_dns_label(good));
        }
        for bad in [
            "",
            "Bad_Name!!",
            "Shop",
            "-shop",
            "shop-",
            "shop.b",
            "shöp",
            &"a".repeat(64),
        ] {
            assert!(!is_dns_label(bad), "{bad}");
            assert_eq!(is_dns_label(bad), ksim_nodes::names::is_dns_label(bad));
        }
    }
}
