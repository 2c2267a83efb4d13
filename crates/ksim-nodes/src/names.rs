//! The name rules the apiserver holds a group's, a node's and a device's names to (RFC 1123),
//! and how a YAML parser's error reads on one line: one place for every reader of skeletons,
//! groups and pods' containers.

/// Whether `name` is an RFC 1123 label: 1 to 63 lowercase letters, digits and '-', starting
/// and ending with a letter or digit.
pub fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(|b| alphanumeric(b) || *b == b'-')
        && bytes.first().is_some_and(alphanumeric)
        && bytes.last().is_some_and(alphanumeric)
}

/// Whether `name` is an RFC 1123 subdomain of at most `max` characters: labels joined by '.'.
pub fn is_dns_subdomain(name: &str, max: usize) -> bool {
    !name.is_empty() && name.len() <= max && name.split('.').all(is_dns_label)
}

/// The parser's first line ("line L column C: what"): the source snippet it appends spans
/// several lines, which reads badly in a gRPC status or a log line.
pub(crate) fn yaml_message(error: &serde_saphyr::Error) -> String {
    let full = error.to_string();
    let first_line = full.lines().next().unwrap_or_default();
    first_line
        .strip_prefix("error: ")
        .unwrap_or(first_line)
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains_follow_rfc_1123() {
        for good in ["a", "gpu-0", "a1", &"x".repeat(63)] {
            assert!(is_dns_label(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"x".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        assert!(is_dns_subdomain("gpu.ksim.io", 63));
        assert!(!is_dns_subdomain("gpu..io", 63));
        assert!(!is_dns_subdomain("gpu.ksim.io", 5));
    }
}
