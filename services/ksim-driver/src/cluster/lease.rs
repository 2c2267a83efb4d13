//! One simulation at a time per cluster: a coordination Lease held by the running simulation
//! and renewed while it runs, so a second driver (or a restarted one) cannot start another.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use ksim_kube::simulation::DRIVER_LEASE;

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "simulation {holder} is running on this cluster (lease {namespace}/{DRIVER_LEASE}); cancel it or wait for it to end"
    )]
    Held { holder: String, namespace: String },
    #[error("reading or writing lease {namespace}/{DRIVER_LEASE}: {source}")]
    Api {
        namespace: String,
        source: kube::Error,
    },
}

#[derive(Clone)]
pub struct SimulationLease {
    api: Api<Lease>,
    namespace: String,
    holder: String,
    duration: Duration,
}

impl std::fmt::Debug for SimulationLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulationLease")
            .field("namespace", &self.namespace)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl SimulationLease {
    /// Takes the lease for `holder`, unless another holder's lease is still live.
    pub async fn acquire(
        client: &Client,
        namespace: &str,
        holder: &str,
        duration: Duration,
    ) -> Result<Self, LeaseError> {
        let lease = Self {
            api: Api::namespaced(client.clone(), namespace),
            namespace: namespace.to_owned(),
            holder: holder.to_owned(),
            duration,
        };
        let api_error = |source| LeaseError::Api {
            namespace: namespace.to_owned(),
            source,
        };
        match lease.api.get_opt(DRIVER_LEASE).await.map_err(api_error)? {
            None => {
                let object = Lease {
                    metadata: ObjectMeta {
                        name: Some(DRIVER_LEASE.to_owned()),
                        ..Default::default()
                    },
                    spec: Some(lease.spec(true)),
                };
                // A concurrent acquirer makes this a 409 conflict: it won.
                if let Err(error) = lease.api.create(&PostParams::default(), &object).await {
                    return Err(lease.conflict_means_held(error).await);
                }
            }
            Some(mut existing) => {
                if let Some(other) = live_holder(&existing, Timestamp::now())
                    && other != holder
                {
                    return Err(LeaseError::Held {
                        holder: other,
                        namespace: namespace.to_owned(),
                    });
                }
                existing.spec = Some(lease.spec(true));
                // The resourceVersion read above makes this a compare-and-swap.
                if let Err(error) = lease
                    .api
                    .replace(DRIVER_LEASE, &PostParams::default(), &existing)
                    .await
                {
                    return Err(lease.conflict_means_held(error).await);
                }
            }
        }
        Ok(lease)
    }

    /// The lease as `holder` holds it, without taking it: for releasing the lease of a
    /// simulation a previous driver process ran.
    pub fn of(client: &Client, namespace: &str, holder: &str, duration: Duration) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            namespace: namespace.to_owned(),
            holder: holder.to_owned(),
            duration,
        }
    }

    /// The simulation holding the lease now, if its holder renewed it within its duration.
    pub async fn live_holder(
        client: &Client,
        namespace: &str,
    ) -> Result<Option<String>, LeaseError> {
        let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let lease = api
            .get_opt(DRIVER_LEASE)
            .await
            .map_err(|source| LeaseError::Api {
                namespace: namespace.to_owned(),
                source,
            })?;
        Ok(lease.and_then(|lease| live_holder(&lease, Timestamp::now())))
    }

    /// Renews the lease; call it well within the lease duration.
    pub async fn renew(&self) -> Result<(), LeaseError> {
        self.write(true).await
    }

    /// Gives the lease up so the next simulation may start at once.
    pub async fn release(&self) -> Result<(), LeaseError> {
        self.write(false).await
    }

    pub fn renew_interval(&self) -> Duration {
        self.duration / 3
    }

    async fn write(&self, held: bool) -> Result<(), LeaseError> {
        let api_error = |source| LeaseError::Api {
            namespace: self.namespace.clone(),
            source,
        };
        let mut existing = self.api.get(DRIVER_LEASE).await.map_err(api_error)?;
        let current = existing
            .spec
            .as_ref()
            .and_then(|spec| spec.holder_identity.clone())
            .unwrap_or_default();
        if current != self.holder {
            return Err(LeaseError::Held {
                holder: current,
                namespace: self.namespace.clone(),
            });
        }
        existing.spec = Some(self.spec(held));
        self.api
            .replace(DRIVER_LEASE, &PostParams::default(), &existing)
            .await
            .map_err(api_error)?;
        Ok(())
    }

    fn spec(&self, held: bool) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: held.then(|| self.holder.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..Default::default()
        }
    }

    /// A conflict means another simulation took the lease between our read and write: named
    /// from the lease as it is now.
    async fn conflict_means_held(&self, error: kube::Error) -> LeaseError {
        if !ksim_kube::is_conflict(&error) {
            return LeaseError::Api {
                namespace: self.namespace.clone(),
                source: error,
            };
        }
        let holder = match self.api.get_opt(DRIVER_LEASE).await {
            Ok(Some(lease)) => lease.spec.and_then(|spec| spec.holder_identity),
            _ => None,
        };
        LeaseError::Held {
            holder: holder.unwrap_or_else(|| "(unknown: the lease changed meanwhile)".to_owned()),
            namespace: self.namespace.clone(),
        }
    }
}

/// The holder of a lease that has not expired at `now`.
fn live_holder(lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref()?.0;
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    let expires = renewed.checked_add(jiff_seconds(seconds)).ok()?;
    (expires > now).then_some(holder)
}

fn jiff_seconds(seconds: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_secs(seconds)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: Timestamp, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(seconds),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_lease_is_live_until_its_duration_has_passed_since_renewal() {
        let renewed: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let live = lease(Some("sim-a"), renewed, 15);
        let at = |s: i64| renewed.checked_add(jiff_seconds(s)).unwrap();
        assert_eq!(live_holder(&live, at(14)), Some("sim-a".to_owned()));
        assert_eq!(live_holder(&live, at(15)), None);
        assert_eq!(live_holder(&lease(None, renewed, 15), at(1)), None);
        assert_eq!(live_holder(&lease(Some(""), renewed, 15), at(1)), None);
    }
}
