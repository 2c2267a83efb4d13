//! cluster-autoscaler's `CloudProvider` service over a [`Provider`]: decodes requests (new and
//! legacy fields alike), encodes answers, and maps errors to the codes CA expects.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_pb::api::core::v1 as k8s;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use ksim_grpc::input::{VALUE_MAX, check_len, check_name};
use ksim_nodes::labels::{BETA_INSTANCE_TYPE_LABEL, INSTANCE_TYPE_LABEL};
use ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc as pb;
use pb::instance_status::InstanceState as PbState;
use prost::Message;
use tonic::{Request, Response, Status};

use crate::{
    domain::{
        group::InstanceState,
        options::ResolvedOptions,
        plan::{NodeRef, PlanError},
    },
    index::GroupInfo,
    provider::{ClusterError, Provider, ProviderError, ProviderWrites},
};

#[derive(Debug)]
pub struct CloudProviderService<C> {
    provider: Arc<Provider<C>>,
}

impl<C: ProviderWrites> CloudProviderService<C> {
    pub fn new(provider: Arc<Provider<C>>) -> Self {
        Self { provider }
    }

    pub fn into_server(self) -> pb::cloud_provider_server::CloudProviderServer<Self> {
        pb::cloud_provider_server::CloudProviderServer::new(self)
    }
}

impl From<ProviderError> for Status {
    fn from(error: ProviderError) -> Self {
        let message = error.to_string();
        match error {
            ProviderError::UnknownGroup(_) => Status::not_found(message),
            ProviderError::Plan(
                PlanError::BadDelta { .. }
                | PlanError::NotKsim { .. }
                | PlanError::OtherGroup { .. },
            ) => Status::invalid_argument(message),
            ProviderError::Plan(
                PlanError::AboveMax { .. }
                | PlanError::BelowMin { .. }
                | PlanError::NotAMember { .. }
                | PlanError::WouldRemoveRegistered { .. },
            )
            | ProviderError::InvalidSkeleton { .. } => Status::failed_precondition(message),
            // What a cloud answers a scale-up it cannot fill; CA backs the group off.
            ProviderError::Plan(PlanError::Stockout { .. }) => Status::resource_exhausted(message),
            ProviderError::NoSkeleton(_) | ProviderError::NotConfigured(_) => {
                Status::unimplemented(message)
            }
            ProviderError::Cluster(ClusterError::Conflict(_)) => Status::aborted(message),
            ProviderError::Pricing(_) => Status::invalid_argument(message),
            ProviderError::NotSynced
            | ProviderError::Timeout { .. }
            | ProviderError::Cluster(_) => Status::unavailable(message),
        }
    }
}

fn node_group(info: GroupInfo) -> pb::NodeGroup {
    pb::NodeGroup {
        id: info.id,
        min_size: info.min,
        max_size: info.max,
        debug: info.debug,
    }
}

/// Runs a resize on a task of its own, to its end: CA's call can be cancelled (CA restarted,
/// its deadline passed) after the resize began writing, and one cut half-way could lower
/// `replicas` without deleting the Node or reporting the removal.
async fn to_completion<C, F, Fut>(provider: &Arc<Provider<C>>, resize: F) -> Result<(), Status>
where
    C: ProviderWrites,
    F: FnOnce(Arc<Provider<C>>) -> Fut,
    Fut: Future<Output = Result<(), ProviderError>> + Send + 'static,
{
    tokio::spawn(resize(provider.clone()))
        .await
        .map_err(|error| Status::internal(format!("the resize failed: {error}")))?
        .map_err(Status::from)
}

fn required_id(id: &str) -> Result<&str, Status> {
    check_name("id", id)?;
    if id.is_empty() {
        Err(Status::invalid_argument("node group id is empty"))
    } else {
        Ok(id)
    }
}

#[tonic::async_trait]
impl<C: ProviderWrites> pb::cloud_provider_server::CloudProvider for CloudProviderService<C> {
    async fn node_groups(
        &self,
        _: Request<pb::NodeGroupsRequest>,
    ) -> Result<Response<pb::NodeGroupsResponse>, Status> {
        let node_groups = self.provider.groups().into_iter().map(node_group).collect();
        Ok(Response::new(pb::NodeGroupsResponse { node_groups }))
    }

    async fn node_group_for_node(
        &self,
        request: Request<pb::NodeGroupForNodeRequest>,
    ) -> Result<Response<pb::NodeGroupForNodeResponse>, Status> {
        let node = request
            .into_inner()
            .node
            .ok_or_else(|| Status::invalid_argument("node is required"))?;
        check_len("node.provider_id", &node.provider_id, VALUE_MAX)?;
        // Placeholder nodes carry only an instance id, as both name and provider ID: the
        // provider ID says where to look, the index whether the node is there. An empty id
        // tells CA the node is not ours.
        let group = self
            .provider
            .group_for_provider_id(&node.provider_id)
            .map(node_group)
            .unwrap_or_default();
        Ok(Response::new(pb::NodeGroupForNodeResponse {
            node_group: Some(group),
        }))
    }

    async fn pricing_node_price(
        &self,
        request: Request<pb::PricingNodePriceRequest>,
    ) -> Result<Response<pb::PricingNodePriceResponse>, Status> {
        let pricing = self.provider.pricing()?;
        let request = request.into_inner();
        let node = request
            .node
            .ok_or_else(|| Status::invalid_argument("node is required"))?;
        let seconds = span(
            request.start_timestamp,
            &request.start_time,
            request.end_timestamp,
            &request.end_time,
        )?;
        let instance_type = node
            .labels
            .get(INSTANCE_TYPE_LABEL)
            .or_else(|| node.labels.get(BETA_INSTANCE_TYPE_LABEL));
        if let Some(instance_type) = instance_type {
            check_name("node.labels[instance-type]", instance_type)?;
        }
        let price = pricing
            .node_price(instance_type.map(String::as_str), seconds)
            .map_err(ProviderError::from)?;
        Ok(Response::new(pb::PricingNodePriceResponse { price }))
    }

    async fn pricing_pod_price(
        &self,
        request: Request<pb::PricingPodPriceRequest>,
    ) -> Result<Response<pb::PricingPodPriceResponse>, Status> {
        let rates = self
            .provider
            .pricing()?
            .pod
            .as_ref()
            .ok_or(ProviderError::NotConfigured("pod pricing"))?;
        let request = request.into_inner();
        let bytes = if request.pod_bytes.is_empty() {
            &request.pod
        } else {
            &request.pod_bytes
        };
        let pod = k8s::Pod::decode(bytes.as_slice())
            .map_err(|e| Status::invalid_argument(format!("pod is not a v1.Pod: {e}")))?;
        let seconds = span(
            request.start_timestamp,
            &request.start_time,
            request.end_timestamp,
            &request.end_time,
        )?;
        let requests: Vec<_> = pod
            .spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .filter_map(|c| c.resources.as_ref())
            .map(|r| &r.requests)
            .collect();
        let requested = |resource: &str| -> Vec<&str> {
            requests
                .iter()
                .filter_map(|r| r.get(resource)?.string.as_deref())
                .collect()
        };
        for quantity in requested("cpu").into_iter().chain(requested("memory")) {
            check_name("pod.spec.containers.resources.requests", quantity)?;
        }
        let price = rates
            .pod_price(&requested("cpu"), &requested("memory"), seconds)
            .map_err(ProviderError::from)?;
        Ok(Response::new(pb::PricingPodPriceResponse { price }))
    }

    async fn gpu_label(
        &self,
        _: Request<pb::GpuLabelRequest>,
    ) -> Result<Response<pb::GpuLabelResponse>, Status> {
        Ok(Response::new(pb::GpuLabelResponse {
            label: self.provider.settings().gpu_label.clone(),
        }))
    }

    async fn get_available_gpu_types(
        &self,
        _: Request<pb::GetAvailableGpuTypesRequest>,
    ) -> Result<Response<pb::GetAvailableGpuTypesResponse>, Status> {
        let gpu_types: BTreeMap<String, prost_types::Any> = self
            .provider
            .gpu_types()
            .into_iter()
            .map(|gpu| (gpu, prost_types::Any::default()))
            .collect();
        Ok(Response::new(pb::GetAvailableGpuTypesResponse {
            gpu_types,
        }))
    }

    async fn cleanup(
        &self,
        _: Request<pb::CleanupRequest>,
    ) -> Result<Response<pb::CleanupResponse>, Status> {
        Ok(Response::new(pb::CleanupResponse {}))
    }

    async fn refresh(
        &self,
        _: Request<pb::RefreshRequest>,
    ) -> Result<Response<pb::RefreshResponse>, Status> {
        self.provider.refresh().await?;
        Ok(Response::new(pb::RefreshResponse {}))
    }

    async fn node_group_target_size(
        &self,
        request: Request<pb::NodeGroupTargetSizeRequest>,
    ) -> Result<Response<pb::NodeGroupTargetSizeResponse>, Status> {
        let request = request.into_inner();
        let target_size = self.provider.target_size(required_id(&request.id)?)?;
        Ok(Response::new(pb::NodeGroupTargetSizeResponse {
            target_size,
        }))
    }

    async fn node_group_increase_size(
        &self,
        request: Request<pb::NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<pb::NodeGroupIncreaseSizeResponse>, Status> {
        let request = request.into_inner();
        required_id(&request.id)?;
        to_completion(&self.provider, move |provider| async move {
            provider.increase_size(&request.id, request.delta).await
        })
        .await?;
        Ok(Response::new(pb::NodeGroupIncreaseSizeResponse {}))
    }

    async fn node_group_delete_nodes(
        &self,
        request: Request<pb::NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<pb::NodeGroupDeleteNodesResponse>, Status> {
        let request = request.into_inner();
        for node in &request.nodes {
            check_name("nodes.name", &node.name)?;
            check_len("nodes.provider_id", &node.provider_id, VALUE_MAX)?;
        }
        let nodes: Vec<NodeRef> = request
            .nodes
            .into_iter()
            .map(|node| NodeRef {
                name: node.name,
                provider_id: node.provider_id,
            })
            .collect();
        if nodes.is_empty() {
            return Err(Status::invalid_argument("no nodes to delete"));
        }
        required_id(&request.id)?;
        to_completion(&self.provider, move |provider| async move {
            provider.delete_nodes(&request.id, &nodes).await
        })
        .await?;
        Ok(Response::new(pb::NodeGroupDeleteNodesResponse {}))
    }

    async fn node_group_decrease_target_size(
        &self,
        request: Request<pb::NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<pb::NodeGroupDecreaseTargetSizeResponse>, Status> {
        let request = request.into_inner();
        required_id(&request.id)?;
        to_completion(&self.provider, move |provider| async move {
            provider
                .decrease_target_size(&request.id, request.delta)
                .await
        })
        .await?;
        Ok(Response::new(pb::NodeGroupDecreaseTargetSizeResponse {}))
    }

    async fn node_group_nodes(
        &self,
        request: Request<pb::NodeGroupNodesRequest>,
    ) -> Result<Response<pb::NodeGroupNodesResponse>, Status> {
        let request = request.into_inner();
        let instances = self
            .provider
            .instances(required_id(&request.id)?)?
            .into_iter()
            .map(|instance| pb::Instance {
                id: instance.id,
                status: Some(pb::InstanceStatus {
                    instance_state: match instance.state {
                        InstanceState::Running => PbState::InstanceRunning,
                        InstanceState::Creating => PbState::InstanceCreating,
                        InstanceState::Deleting => PbState::InstanceDeleting,
                    }
                    .into(),
                    error_info: instance.problem.map(|message| pb::InstanceErrorInfo {
                        error_code: "NodeNotReady".to_owned(),
                        error_message: message,
                        // 99: Other. CA acts on the error info of instances still creating
                        // or not registered (clusterstate.go), so a running one with a
                        // registered node is not torn down for it.
                        instance_error_class: 99,
                    }),
                }),
            })
            .collect();
        Ok(Response::new(pb::NodeGroupNodesResponse { instances }))
    }

    async fn node_group_template_node_info(
        &self,
        request: Request<pb::NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<pb::NodeGroupTemplateNodeInfoResponse>, Status> {
        let request = request.into_inner();
        let node = self.provider.template_node(required_id(&request.id)?)?;
        // CA <= 1.34.1 reads field 1, 1.34.2 prefers 2, >= 1.35 reads only 2.
        Ok(Response::new(pb::NodeGroupTemplateNodeInfoResponse {
            node_info: node.clone(),
            node_bytes: node,
        }))
    }

    async fn node_group_get_options(
        &self,
        request: Request<pb::NodeGroupAutoscalingOptionsRequest>,
    ) -> Result<Response<pb::NodeGroupAutoscalingOptionsResponse>, Status> {
        let request = request.into_inner();
        let defaults = resolved(request.defaults.unwrap_or_default())?;
        let options = self
            .provider
            .options(required_id(&request.id)?, &defaults)?;
        Ok(Response::new(pb::NodeGroupAutoscalingOptionsResponse {
            node_group_autoscaling_options: Some(options_pb(&options)),
        }))
    }
}

/// Seconds from start to end, from the Timestamp fields or, for CA <= 1.34, the legacy
/// `meta/v1.Time` bytes.
fn span(
    start: Option<prost_types::Timestamp>,
    legacy_start: &[u8],
    end: Option<prost_types::Timestamp>,
    legacy_end: &[u8],
) -> Result<f64, Status> {
    let start = instant("start", start, legacy_start)?;
    let end = instant("end", end, legacy_end)?;
    Ok(end - start)
}

fn instant(
    which: &str,
    timestamp: Option<prost_types::Timestamp>,
    legacy: &[u8],
) -> Result<f64, Status> {
    let (seconds, nanos) = match timestamp {
        Some(t) => (t.seconds, t.nanos),
        None if !legacy.is_empty() => {
            let time = meta::Time::decode(legacy).map_err(|e| {
                Status::invalid_argument(format!("{which} time is not a meta/v1.Time: {e}"))
            })?;
            (time.seconds.unwrap_or(0), time.nanos.unwrap_or(0))
        }
        None => {
            return Err(Status::invalid_argument(format!(
                "{which} time is required"
            )));
        }
    };
    #[allow(clippy::cast_precision_loss)] // seconds since 1970 fit f64's 53 bits exactly
    Ok(seconds as f64 + f64::from(nanos) / 1e9)
}

fn resolved(options: pb::NodeGroupAutoscalingOptions) -> Result<ResolvedOptions, Status> {
    Ok(ResolvedOptions {
        scale_down_utilization_threshold: options.scale_down_utilization_threshold,
        scale_down_gpu_utilization_threshold: options.scale_down_gpu_utilization_threshold,
        scale_down_unneeded_time: duration(
            options.scale_down_unneeded_duration,
            &options.scale_down_unneeded_time,
        )?,
        scale_down_unready_time: duration(
            options.scale_down_unready_duration,
            &options.scale_down_unready_time,
        )?,
        max_node_provision_time: duration(
            options.max_node_provision_duration,
            &options.max_node_provision_time,
        )?,
        zero_or_max_node_scaling: options.zero_or_max_node_scaling,
        ignore_daemon_sets_utilization: options.ignore_daemon_sets_utilization,
    })
}

fn duration(value: Option<prost_types::Duration>, legacy: &[u8]) -> Result<Duration, Status> {
    let nanos: i128 = match value {
        Some(d) => i128::from(d.seconds) * 1_000_000_000 + i128::from(d.nanos),
        None if !legacy.is_empty() => {
            let d = meta::Duration::decode(legacy).map_err(|e| {
                Status::invalid_argument(format!("default duration is not a meta/v1.Duration: {e}"))
            })?;
            i128::from(d.duration.unwrap_or(0))
        }
        None => 0,
    };
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| Status::invalid_argument("default durations must be non-negative"))
}

fn options_pb(options: &ResolvedOptions) -> pb::NodeGroupAutoscalingOptions {
    let both = |d: Duration| {
        let legacy = meta::Duration {
            duration: Some(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
        }
        .encode_to_vec();
        let current = prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
            seconds: i64::MAX,
            nanos: 0,
        });
        (legacy, Some(current))
    };
    let (unneeded_legacy, unneeded) = both(options.scale_down_unneeded_time);
    let (unready_legacy, unready) = both(options.scale_down_unready_time);
    let (provision_legacy, provision) = both(options.max_node_provision_time);
    pb::NodeGroupAutoscalingOptions {
        scale_down_utilization_threshold: options.scale_down_utilization_threshold,
        scale_down_gpu_utilization_threshold: options.scale_down_gpu_utilization_threshold,
        scale_down_unneeded_time: unneeded_legacy,
        scale_down_unready_time: unready_legacy,
        max_node_provision_time: provision_legacy,
        zero_or_max_node_scaling: options.zero_or_max_node_scaling,
        ignore_daemon_sets_utilization: options.ignore_daemon_sets_utilization,
        scale_down_unneeded_duration: unneeded,
        scale_down_unready_duration: unready,
        max_node_provision_duration: provision,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::Code;

    use super::*;
    use ksim_nodes::pricing::PricingError;

    #[test]
    fn errors_map_to_the_codes_cluster_autoscaler_handles() {
        let plan = |e: PlanError| ProviderError::Plan(e);
        let cases = [
            (ProviderError::UnknownGroup("x".into()), Code::NotFound),
            (
                plan(PlanError::BadDelta {
                    delta: 0,
                    expected: "positive",
                }),
                Code::InvalidArgument,
            ),
            (
                plan(PlanError::BelowMin {
                    group: "g".into(),
                    removing: 1,
                    left: 0,
                    min: 1,
                    held: false,
                }),
                Code::FailedPrecondition,
            ),
            (
                plan(PlanError::NotAMember {
                    node: "n".into(),
                    provider_id: "ksim://g/n".into(),
                    group: "g".into(),
                }),
                Code::FailedPrecondition,
            ),
            (ProviderError::NoSkeleton("g".into()), Code::Unimplemented),
            (ProviderError::NotConfigured("pricing"), Code::Unimplemented),
            (
                ProviderError::Cluster(ClusterError::Conflict("d".into())),
                Code::Aborted,
            ),
            (ProviderError::NotSynced, Code::Unavailable),
            (
                ProviderError::Timeout {
                    group: "g".into(),
                    what: "w".into(),
                    timeout: Duration::from_secs(1),
                },
                Code::Unavailable,
            ),
            (
                ProviderError::Pricing(PricingError::NoInstanceType),
                Code::InvalidArgument,
            ),
        ];
        for (error, code) in cases {
            let message = error.to_string();
            let status = Status::from(error);
            assert_eq!(status.code(), code, "{message}");
            assert_eq!(status.message(), message);
        }
    }

    #[test]
    fn legacy_and_current_durations_decode_alike_and_negative_ones_are_refused() {
        let legacy = meta::Duration {
            duration: Some(90_000_000_000),
        }
        .encode_to_vec();
        assert_eq!(duration(None, &legacy).unwrap(), Duration::from_secs(90));
        let current = prost_types::Duration {
            seconds: 90,
            nanos: 0,
        };
        assert_eq!(
            duration(Some(current), &[]).unwrap(),
            Duration::from_secs(90)
        );
        let negative = prost_types::Duration {
            seconds: -1,
            nanos: 0,
        };
        assert_eq!(
            duration(Some(negative), &[]).unwrap_err().code(),
            Code::InvalidArgument
        );
        // Both encodings go back out, so every CA version reads the same value.
        let options = options_pb(&ResolvedOptions {
            max_node_provision_time: Duration::from_secs(90),
            ..ResolvedOptions::default()
        });
        assert_eq!(
            duration(None, &options.max_node_provision_time).unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            options.max_node_provision_duration.map(|d| d.seconds),
            Some(90)
        );
    }
}
