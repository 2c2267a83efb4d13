//! `ksim.vnode.v1.VirtualNodePool` over a [`Pool`]: maps requests in, views out, and pool
//! errors to gRPC status codes.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use ksim_grpc::input::{Echo, TEXT_MAX, check_len, check_name};
use ksim_proto::ksim::vnode::v1 as pb;
use tonic::{Request, Response, Status};

use crate::{
    domain::{heartbeat::requested_lease, usage::ContainerUsage},
    index::{GroupSource, NodeNamesError, PhaseCounts},
    pool::{GroupView, NodeView, PodUsageUpdate, Pool, PoolError},
};

const DEFAULT_PAGE_SIZE: usize = 500;
const MAX_PAGE_SIZE: usize = 5000;

#[derive(Debug, Clone)]
pub struct VirtualNodePoolService {
    pool: Arc<Pool>,
}

impl VirtualNodePoolService {
    pub fn new(pool: Arc<Pool>) -> Self {
        Self { pool }
    }

    pub fn into_server(self) -> pb::virtual_node_pool_server::VirtualNodePoolServer<Self> {
        pb::virtual_node_pool_server::VirtualNodePoolServer::new(self)
    }
}

impl From<PoolError> for Status {
    fn from(error: PoolError) -> Self {
        let message = error.to_string();
        match error {
            PoolError::InvalidGroup(_)
            | PoolError::Usage { .. }
            | PoolError::TooManyUsagePods(_)
            | PoolError::Skeleton(_)
            | PoolError::Provisioning(_)
            | PoolError::CidrExhausted { .. }
            | PoolError::Lease(_)
            | PoolError::NodeNames(NodeNamesError::Empty | NodeNamesError::Repeated(_)) => {
                Status::invalid_argument(message)
            }
            // As the cloud provider answers for a group it does not know.
            PoolError::UnknownGroup(_) | PoolError::NodeNames(NodeNamesError::Unknown(_)) => {
                Status::not_found(message)
            }
            PoolError::GroupExists(_) => Status::already_exists(message),
            PoolError::NotPoolManaged(_)
            | PoolError::KarpenterGroup(_)
            | PoolError::HeldBySimulation { .. } => Status::failed_precondition(message),
            // Only at start, from the flags: never an answer to a call.
            PoolError::Cidr(_) | PoolError::Kubelet(_) => Status::internal(message),
            PoolError::Kube(_) => Status::unavailable(message),
        }
    }
}

/// Whether `token` may be a page token: empty, or a node name (a DNS subdomain).
fn is_page_token(token: &str) -> bool {
    token.len() <= 253
        && token
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

#[tonic::async_trait]
impl pb::virtual_node_pool_server::VirtualNodePool for VirtualNodePoolService {
    async fn create_node_group(
        &self,
        request: Request<pb::CreateNodeGroupRequest>,
    ) -> Result<Response<pb::CreateNodeGroupResponse>, Status> {
        let request = request.into_inner();
        check_name("name", &request.name)?;
        check_len("node_skeleton_yaml", &request.node_skeleton_yaml, TEXT_MAX)?;
        check_len("provisioning_json", &request.provisioning_json, TEXT_MAX)?;
        let group = self
            .pool
            .create_provisioned_group(
                &request.name,
                &request.node_skeleton_yaml,
                request.count,
                &request.provisioning_json,
            )
            .await?;
        Ok(Response::new(pb::CreateNodeGroupResponse {
            node_group: Some(group_message(&group)),
        }))
    }

    async fn scale_node_group(
        &self,
        request: Request<pb::ScaleNodeGroupRequest>,
    ) -> Result<Response<pb::ScaleNodeGroupResponse>, Status> {
        let request = request.into_inner();
        check_name("name", &request.name)?;
        let group = self.pool.scale_group(&request.name, request.count).await?;
        Ok(Response::new(pb::ScaleNodeGroupResponse {
            node_group: Some(group_message(&group)),
        }))
    }

    async fn delete_node_group(
        &self,
        request: Request<pb::DeleteNodeGroupRequest>,
    ) -> Result<Response<pb::DeleteNodeGroupResponse>, Status> {
        let name = request.into_inner().name;
        check_name("name", &name)?;
        self.pool.delete_group(&name).await?;
        Ok(Response::new(pb::DeleteNodeGroupResponse {}))
    }

    async fn get_node_group(
        &self,
        request: Request<pb::GetNodeGroupRequest>,
    ) -> Result<Response<pb::GetNodeGroupResponse>, Status> {
        let name = request.into_inner().name;
        check_name("name", &name)?;
        let group = self.pool.group(&name)?;
        Ok(Response::new(pb::GetNodeGroupResponse {
            node_group: Some(group_message(&group)),
        }))
    }

    async fn list_node_groups(
        &self,
        _request: Request<pb::ListNodeGroupsRequest>,
    ) -> Result<Response<pb::ListNodeGroupsResponse>, Status> {
        Ok(Response::new(pb::ListNodeGroupsResponse {
            node_groups: self.pool.groups().iter().map(group_message).collect(),
        }))
    }

    async fn list_nodes(
        &self,
        request: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::ListNodesResponse>, Status> {
        let request = request.into_inner();
        check_name("node_group", &request.node_group)?;
        let page_size = match usize::try_from(request.page_size) {
            Ok(0) => DEFAULT_PAGE_SIZE,
            Ok(size) => size.min(MAX_PAGE_SIZE),
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "page_size must not be negative (got {})",
                    request.page_size
                )));
            }
        };
        if !is_page_token(&request.page_token) {
            return Err(Status::invalid_argument(format!(
                "page_token {:?} is not one this API returned (a node name); start with an empty one",
                Echo(&request.page_token).to_string()
            )));
        }
        let group = Some(request.node_group.as_str()).filter(|g| !g.is_empty());
        // Nodes come sorted by name; the page token is the last name already returned.
        let nodes = self.pool.nodes(group)?;
        let mut page: Vec<&NodeView> = nodes
            .iter()
            .filter(|node| request.page_token.is_empty() || node.name > request.page_token)
            .take(page_size + 1)
            .collect();
        let next_page_token = if page.len() > page_size {
            page.truncate(page_size);
            page.last()
                .map(|node| node.name.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListNodesResponse {
            nodes: page.into_iter().map(node_message).collect(),
            next_page_token,
        }))
    }

    async fn get_pool_stats(
        &self,
        _request: Request<pb::GetPoolStatsRequest>,
    ) -> Result<Response<pb::GetPoolStatsResponse>, Status> {
        let stats = self.pool.stats();
        Ok(Response::new(pb::GetPoolStatsResponse {
            nodes_total: stats.nodes_total,
            nodes_ready: stats.nodes_ready,
            pods: Some(phase_message(stats.pods)),
            lease_renewals_per_second: stats.renewals_per_second,
            api_errors_total: stats.api_errors,
            ip_exhaustion_total: stats.ip_exhaustions,
            node_groups: stats.node_groups,
        }))
    }

    async fn set_pod_usage(
        &self,
        request: Request<pb::SetPodUsageRequest>,
    ) -> Result<Response<pb::SetPodUsageResponse>, Status> {
        let pods = request.into_inner().pods;
        for pod in &pods {
            check_name("pods.namespace", &pod.namespace)?;
            check_name("pods.name", &pod.name)?;
            for container in &pod.containers {
                check_name("pods.containers.name", &container.name)?;
            }
        }
        let pods = pods
            .into_iter()
            .map(|pod| PodUsageUpdate {
                namespace: pod.namespace,
                name: pod.name,
                containers: pod
                    .containers
                    .into_iter()
                    .map(|container| ContainerUsage {
                        name: container.name,
                        cpu_nanocores: container.cpu_nanocores,
                        memory_bytes: container.memory_bytes,
                    })
                    .collect(),
            })
            .collect();
        let applied = self.pool.set_pod_usage(pods, Timestamp::now()).await?;
        Ok(Response::new(pb::SetPodUsageResponse {
            applied: applied.applied,
            not_running: applied.not_running,
            oom_kills: applied
                .oom_kills
                .into_iter()
                .map(|kill| pb::OomKill {
                    namespace: kill.namespace,
                    name: kill.name,
                    container: kill.container,
                    restarted: kill.restarted,
                })
                .collect(),
            throttled: applied
                .throttled
                .into_iter()
                .map(|throttling| pb::Throttling {
                    namespace: throttling.namespace,
                    name: throttling.name,
                    container: throttling.container,
                    cpu_seconds: throttling.cpu_seconds,
                })
                .collect(),
            evicted: applied
                .evicted
                .into_iter()
                .map(|eviction| pb::PodEviction {
                    namespace: eviction.namespace,
                    name: eviction.name,
                    node: eviction.node,
                    message: eviction.message,
                })
                .collect(),
        }))
    }

    async fn fail_nodes(
        &self,
        request: Request<pb::FailNodesRequest>,
    ) -> Result<Response<pb::FailNodesResponse>, Status> {
        let names = request.into_inner().node_names;
        node_names(&names)?;
        self.pool.fail_nodes(&names)?;
        Ok(Response::new(pb::FailNodesResponse {}))
    }

    async fn recover_nodes(
        &self,
        request: Request<pb::RecoverNodesRequest>,
    ) -> Result<Response<pb::RecoverNodesResponse>, Status> {
        let names = request.into_inner().node_names;
        node_names(&names)?;
        self.pool.recover_nodes(&names)?;
        Ok(Response::new(pb::RecoverNodesResponse {}))
    }

    async fn set_node_lease(
        &self,
        request: Request<pb::SetNodeLeaseRequest>,
    ) -> Result<Response<pb::SetNodeLeaseResponse>, Status> {
        let (seconds, nanos) = request
            .into_inner()
            .duration
            .map_or((0, 0), |duration| (duration.seconds, duration.nanos));
        let lease = requested_lease(seconds, nanos).map_err(PoolError::from)?;
        let in_force = self.pool.set_node_lease(lease)?;
        Ok(Response::new(pb::SetNodeLeaseResponse {
            duration: Some(duration_message(in_force)),
        }))
    }
}

/// Node names as a request carries them, each of a bounded length.
fn node_names(names: &[String]) -> Result<(), Status> {
    names
        .iter()
        .try_for_each(|name| check_name("node_names", name))
}

fn duration_message(duration: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        // Below a billion, so it fits.
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or_default(),
    }
}

fn group_message(group: &GroupView) -> pb::NodeGroup {
    let (source, deployment) = match &group.source {
        GroupSource::PoolManaged { .. } => (pb::NodeGroupSource::PoolManaged, None),
        GroupSource::Karpenter => (pb::NodeGroupSource::Karpenter, None),
        GroupSource::Deployment {
            namespace, name, ..
        } => (
            pb::NodeGroupSource::Deployment,
            Some(pb::DeploymentRef {
                namespace: namespace.clone(),
                name: name.clone(),
            }),
        ),
    };
    let skeleton = &group.skeleton;
    let quantities = |map: &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >| { map.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect() };
    pb::NodeGroup {
        name: group.name.clone(),
        source: source.into(),
        deployment,
        desired_nodes: clamp(group.desired),
        registered_nodes: clamp(group.registered),
        ready_nodes: clamp(group.ready),
        skeleton: Some(pb::SkeletonSummary {
            labels: skeleton.labels.clone().into_iter().collect(),
            taints: skeleton
                .taints
                .iter()
                .map(|taint| pb::Taint {
                    key: taint.key.clone(),
                    value: taint.value.clone().unwrap_or_default(),
                    effect: taint.effect.clone(),
                })
                .collect(),
            capacity: quantities(&skeleton.capacity),
            allocatable: quantities(&skeleton.allocatable),
            instance_type: skeleton.instance_type().unwrap_or_default().to_owned(),
            architecture: skeleton.node_info.architecture.clone(),
            operating_system: skeleton.node_info.operating_system.clone(),
            kubelet_version: skeleton.node_info.kubelet_version.clone(),
        }),
        create_time: Some(timestamp(group.created)),
        provisioning_model: group.provisioning_model.clone().unwrap_or_default(),
    }
}

fn node_message(node: &NodeView) -> pb::Node {
    pb::Node {
        name: node.name.clone(),
        node_group: node.group.clone(),
        provider_id: node.provider_id.clone(),
        ready: node.ready,
        pod_cidr: node.pod_cidr.to_string(),
        pods: Some(phase_message(node.pods)),
        last_heartbeat_time: node.last_heartbeat.map(timestamp),
        internal_ip: node.internal_ip.to_string(),
        create_time: Some(timestamp(node.created)),
        failed: node.failed,
    }
}

fn phase_message(counts: PhaseCounts) -> pb::PodPhaseCounts {
    pb::PodPhaseCounts {
        pending: counts.pending,
        running: counts.running,
        succeeded: counts.succeeded,
        failed: counts.failed,
        unknown: counts.unknown,
    }
}

fn timestamp(at: Timestamp) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.as_second(),
        nanos: at.subsec_nanosecond(),
    }
}

fn clamp(count: u32) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}
