//! Registering an extension apiserver with the aggregation layer, so that the apiserver proxies
//! one API group version to it: a Service without a selector, an EndpointSlice naming the
//! process's address, and the APIService that routes the group to the Service.
//!
//! The apiserver refuses loopback addresses in EndpointSlices, and with aggregator routing it
//! proxies to the endpoint itself (an ExternalName Service is refused: "unsupported service
//! type"), so the server must listen on an address the apiserver reaches directly:
//! [`advertise_address`] finds one on this machine.

use std::{collections::BTreeMap, net::IpAddr};

use k8s_openapi::{
    api::{core::v1::Service, discovery::v1::EndpointSlice},
    kube_aggregator::pkg::apis::apiregistration::v1::APIService,
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
};
use serde_json::json;

use crate::is_not_found;

/// The Service's port, as metrics-server's release manifest has it; its endpoint is the real
/// serving port.
const SERVICE_PORT: u16 = 443;
const PORT_NAME: &str = "https";

/// One aggregated API and the objects that route it.
#[derive(Debug, Clone)]
pub struct AggregatedApi {
    /// `<version>.<group>`, e.g. `v1beta1.metrics.k8s.io`.
    pub api_service: String,
    pub group: String,
    pub version: String,
    /// Where the Service and its EndpointSlice live. The apiserver checks the serving
    /// certificate against `<service>.<namespace>.svc`.
    pub namespace: String,
    pub service: String,
    /// The server-side apply field manager; also the EndpointSlice's `managed-by`.
    pub field_manager: String,
    /// Labels on all three objects, e.g. to tell one's own APIService from another's.
    pub labels: BTreeMap<String, String>,
}

impl AggregatedApi {
    /// `<service>.<namespace>.svc`: the name the serving certificate must carry.
    pub fn service_dns(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }

    /// Applies (server-side, so a restart updates them in place) the Service without a
    /// selector, its EndpointSlice pointing at `ip:port`, and the APIService that routes the
    /// group version to it, trusting `ca_pem` for the serving certificate.
    pub async fn register(
        &self,
        client: &Client,
        ip: IpAddr,
        port: u16,
        ca_pem: &[u8],
    ) -> Result<(), kube::Error> {
        let params = PatchParams::apply(&self.field_manager).force();
        let service = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": self.service, "namespace": self.namespace, "labels": self.labels},
            // No selector: no pod backs it, the EndpointSlice below names the process.
            "spec": {"ports": [{"name": PORT_NAME, "port": SERVICE_PORT, "protocol": "TCP", "targetPort": port}]},
        });
        Api::<Service>::namespaced(client.clone(), &self.namespace)
            .patch(&self.service, &params, &Patch::Apply(&service))
            .await?;
        let address_type = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
        let mut slice_labels = self.labels.clone();
        slice_labels.insert("kubernetes.io/service-name".into(), self.service.clone());
        // Not the endpointslice controller's, so it leaves the slice alone.
        slice_labels.insert(
            "endpointslice.kubernetes.io/managed-by".into(),
            self.field_manager.clone(),
        );
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": self.service, "namespace": self.namespace, "labels": slice_labels},
            "addressType": address_type,
            "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true}}],
            "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}],
        });
        Api::<EndpointSlice>::namespaced(client.clone(), &self.namespace)
            .patch(&self.service, &params, &Patch::Apply(&slice))
            .await?;
        let api_service = json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": self.api_service, "labels": self.labels},
            "spec": {
                "group": self.group,
                "version": self.version,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "service": {"namespace": self.namespace, "name": self.service, "port": SERVICE_PORT},
                "caBundle": k8s_openapi::ByteString(ca_pem.to_vec()),
            },
        });
        Api::<APIService>::all(client.clone())
            .patch(&self.api_service, &params, &Patch::Apply(&api_service))
            .await?;
        Ok(())
    }

    /// Deletes the APIService, the Service and its EndpointSlice; any already gone is fine.
    pub async fn unregister(&self, client: &Client) -> Result<(), kube::Error> {
        let params = DeleteParams::default();
        gone(
            Api::<APIService>::all(client.clone())
                .delete(&self.api_service, &params)
                .await,
        )?;
        gone(
            Api::<Service>::namespaced(client.clone(), &self.namespace)
                .delete(&self.service, &params)
                .await,
        )?;
        gone(
            Api::<EndpointSlice>::namespaced(client.clone(), &self.namespace)
                .delete(&self.service, &params)
                .await,
        )
    }

    /// The APIService as it is now, if it exists.
    pub async fn get(&self, client: &Client) -> Result<Option<APIService>, kube::Error> {
        Api::<APIService>::all(client.clone())
            .get_opt(&self.api_service)
            .await
    }
}

/// A deletion whose object was already gone succeeded too.
fn gone<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(error) if is_not_found(&error) => Ok(()),
        other => other.map(|_| ()),
    }
}

/// `Ok` when the APIService's Available condition is True, else what it says instead.
pub fn available(api_service: &APIService) -> Result<(), String> {
    let condition = api_service
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Available"));
    match condition {
        Some(condition) if condition.status == "True" => Ok(()),
        Some(condition) => Err(format!(
            "Available={} ({}: {})",
            condition.status,
            condition.reason.as_deref().unwrap_or(""),
            condition.message.as_deref().unwrap_or("")
        )),
        None => Err("no Available condition yet".to_owned()),
    }
}

/// This machine's first non-loopback IPv4 address on an interface that is up: one the
/// apiserver accepts in an EndpointSlice and can reach.
pub fn advertise_address() -> Option<IpAddr> {
    if_addrs::get_if_addrs()
        .ok()?
        .into_iter()
        .map(|interface| interface.ip())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn an_available_condition_is_read_and_any_other_is_said() {
        let with = |status: &str| -> APIService {
            serde_json::from_value(json!({
                "metadata": {"name": "v1beta1.metrics.k8s.io"},
                "status": {"conditions": [{
                    "type": "Available", "status": status,
                    "reason": "FailedDiscoveryCheck", "message": "no route",
                }]},
            }))
            .unwrap()
        };
        assert_eq!(available(&with("True")), Ok(()));
        assert_eq!(
            available(&with("False")),
            Err("Available=False (FailedDiscoveryCheck: no route)".to_owned())
        );
        assert!(available(&APIService::default()).is_err());
    }

    #[test]
    fn the_serving_name_is_the_service_dns_name() {
        let api = AggregatedApi {
            api_service: "v1beta1.metrics.k8s.io".into(),
            group: "metrics.k8s.io".into(),
            version: "v1beta1".into(),
            namespace: "kube-system".into(),
            service: "metrics-server".into(),
            field_manager: "test".into(),
            labels: BTreeMap::new(),
        };
        assert_eq!(api.service_dns(), "metrics-server.kube-system.svc");
    }
}
