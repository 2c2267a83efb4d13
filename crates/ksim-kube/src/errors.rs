//! What an apiserver answer means to a caller: deletes treat "not found" as done, creates
//! treat "conflict" as someone-else-won. One place, so every service reads codes the same way.

/// The HTTP status of an apiserver answer; `None` for transport and client-side errors.
pub fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// 404: the object (or its kind) does not exist.
pub fn is_not_found(error: &kube::Error) -> bool {
    status_code(error) == Some(404)
}

/// 409: it already exists, or a resourceVersion precondition failed.
pub fn is_conflict(error: &kube::Error) -> bool {
    status_code(error) == Some(409)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("answer", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn codes_are_read_from_api_answers_only() {
        assert!(is_not_found(&api_error(404)));
        assert!(!is_not_found(&api_error(409)));
        assert!(is_conflict(&api_error(409)));
        assert!(!is_conflict(&api_error(404)));
        assert_eq!(status_code(&api_error(422)), Some(422));
        let transport = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert_eq!(status_code(&transport), None);
        assert!(!is_not_found(&transport));
    }
}
