//! Waiting for the control plane to reach a state, with an upper bound so a broken test fails
//! instead of hanging. The bound is a deadline, not a performance assertion.

use std::{future::Future, time::Duration};

const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How long one check may take before it is abandoned and made again: a request on a wedged
/// connection would otherwise hang the test past its deadline.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// `what` did not happen within the deadline.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {seconds} s waiting for {what}; last seen: {last_seen}")]
pub struct TimedOut {
    pub what: String,
    pub seconds: u64,
    pub last_seen: String,
}

/// Polls `check` until it returns `Ok(value)`. `Err(description)` means "not yet" and says
/// what was seen, which goes into the timeout error. A check that does not answer within 30 s
/// (or the time left) counts as "not yet" and is made again.
pub async fn until<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> Result<T, TimedOut>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = tokio::time::Instant::now();
    let mut last_seen: Option<String> = None;
    loop {
        let bound = deadline
            .saturating_sub(started.elapsed())
            .min(CHECK_TIMEOUT);
        match tokio::time::timeout(bound, check()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(seen)) => last_seen = Some(seen),
            // A last check cut short by the deadline keeps what the one before saw.
            Err(_) if last_seen.is_some() && started.elapsed() >= deadline => {}
            Err(_) => {
                last_seen = Some(format!(
                    "no answer from the check within {:.1} s",
                    bound.as_secs_f64()
                ));
            }
        }
        if started.elapsed() >= deadline {
            return Err(TimedOut {
                what: what.to_owned(),
                seconds: deadline.as_secs(),
                last_seen: last_seen.unwrap_or_default(),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Waits for `namespace`'s default ServiceAccount, which the controller manager makes: until
/// it exists, the ServiceAccount admission plugin refuses the namespace's pods.
pub async fn default_service_account(
    client: &kube::Client,
    namespace: &str,
    deadline: Duration,
) -> Result<(), TimedOut> {
    let accounts: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
        kube::Api::namespaced(client.clone(), namespace);
    until(
        &format!("the default ServiceAccount of {namespace}"),
        deadline,
        || async {
            match accounts.get_opt("default").await {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err("missing".to_owned()),
                Err(error) => Err(error.to_string()),
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_value_once_the_check_passes() {
        let mut calls = 0;
        let value = until("three calls", Duration::from_secs(10), || {
            calls += 1;
            let done = calls >= 3;
            async move {
                if done {
                    Ok(calls)
                } else {
                    Err(format!("{calls} calls"))
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_check_that_hangs_is_made_again_and_the_deadline_holds() {
        let mut calls = 0;
        let value = until("an answer", Duration::from_secs(120), || {
            calls += 1;
            let hangs = calls == 1;
            async move {
                if hangs {
                    std::future::pending::<()>().await;
                }
                Ok(calls)
            }
        })
        .await
        .unwrap();
        assert_eq!(value, 2);

        let err = until::<(), _, _>("never", Duration::from_secs(45), std::future::pending)
            .await
            .unwrap_err();
        assert!(err.last_seen.contains("no answer"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_check_cut_short_by_the_deadline_keeps_what_the_one_before_saw() {
        let mut calls = 0;
        let err = until::<(), _, _>("never", Duration::from_secs(1), || {
            calls += 1;
            let first = calls == 1;
            async move {
                if !first {
                    std::future::pending::<()>().await;
                }
                Err("still no".to_owned())
            }
        })
        .await
        .unwrap_err();
        assert_eq!(err.last_seen, "still no");
    }

    #[tokio::test]
    async fn times_out_with_what_it_last_saw() {
        let err = until::<(), _, _>("never", Duration::ZERO, || async {
            Err("still no".to_owned())
        })
        .await
        .unwrap_err();
        assert_eq!(err.last_seen, "still no");
        assert!(err.to_string().contains("waiting for never"), "{err}");
    }
}
