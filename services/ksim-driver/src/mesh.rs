//! gRPC clients of the other ksim services. Every call carries the caller's trace context, so
//! one simulation is one OpenTelemetry trace across the mesh.

use ksim_proto::{
    clusterautoscaler::cloudprovider::v1::externalgrpc::{
        ExternalGrpcNode, NodeGroupAutoscalingOptions, NodeGroupAutoscalingOptionsRequest,
        NodeGroupsRequest, PricingNodePriceRequest, cloud_provider_client::CloudProviderClient,
    },
    ksim::{
        env::v1::{
            self as env, ApplyConfigurationRequest, CheckConfigurationRequest,
            GetUnremovableNodesRequest, ListAutoscalerOutagesRequest, RestoreDefaultsRequest,
            environment_client::EnvironmentClient,
        },
        trace::v1::{ExportRequest, trace_store_client::TraceStoreClient},
        vnode::v1::{
            CreateNodeGroupRequest, DeleteNodeGroupRequest, FailNodesRequest, ListNodesRequest,
            Node, PodUsage, RecoverNodesRequest, SetNodeLeaseRequest, SetPodUsageRequest,
            SetPodUsageResponse, virtual_node_pool_client::VirtualNodePoolClient,
        },
    },
};
use tonic::{body::Body, transport::Channel};
use tower::util::MapRequest;

type Traced = MapRequest<Channel, fn(http::Request<Body>) -> http::Request<Body>>;

#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error("{service} URL {url:?} is invalid: {source}")]
    Url {
        service: &'static str,
        url: String,
        source: http::uri::InvalidUri,
    },
    #[error("no {0} URL is configured")]
    NotConfigured(&'static str),
    #[error("{service}: {status}")]
    Call {
        service: &'static str,
        status: tonic::Status,
    },
}

/// Connected lazily: a service that is down fails the calls that need it, not the driver's
/// start-up.
#[derive(Debug, Clone)]
pub struct Mesh {
    pool: VirtualNodePoolClient<Traced>,
    tracer: Option<TraceStoreClient<Traced>>,
    cloud_provider: Option<CloudProviderClient<Traced>>,
    environment: Option<EnvironmentClient<Traced>>,
}

fn channel(service: &'static str, url: &str) -> Result<Traced, MeshError> {
    let channel = Channel::from_shared(url.to_owned())
        .map_err(|e| MeshError::Url {
            service,
            url: url.to_owned(),
            source: e,
        })?
        .connect_lazy();
    let inject: fn(http::Request<Body>) -> http::Request<Body> = ksim_grpc::inject_trace_context;
    Ok(MapRequest::new(channel, inject))
}

fn pool_call(status: tonic::Status) -> MeshError {
    MeshError::Call {
        service: "pool",
        status,
    }
}

impl Mesh {
    pub fn new(
        pool_url: &str,
        tracer_url: Option<&str>,
        cloud_provider_url: Option<&str>,
        environment_url: Option<&str>,
    ) -> Result<Self, MeshError> {
        Ok(Self {
            pool: VirtualNodePoolClient::new(channel("pool", pool_url)?),
            tracer: tracer_url
                .map(|url| channel("tracer", url).map(TraceStoreClient::new))
                .transpose()?,
            cloud_provider: cloud_provider_url
                .map(|url| channel("cloud provider", url).map(CloudProviderClient::new))
                .transpose()?,
            environment: environment_url
                .map(|url| channel("environment", url).map(EnvironmentClient::new))
                .transpose()?,
        })
    }

    /// The whole exported trace file.
    pub async fn export(&self, request: ExportRequest) -> Result<Vec<u8>, MeshError> {
        let call = |status| MeshError::Call {
            service: "tracer",
            status,
        };
        let mut tracer = self
            .tracer
            .clone()
            .ok_or(MeshError::NotConfigured("tracer"))?;
        let mut chunks = tracer.export(request).await.map_err(call)?.into_inner();
        let mut file = Vec::new();
        while let Some(chunk) = chunks.message().await.map_err(call)? {
            file.extend_from_slice(&chunk.data);
        }
        Ok(file)
    }

    pub async fn create_node_group(
        &self,
        name: &str,
        skeleton_yaml: &str,
        count: i32,
    ) -> Result<(), MeshError> {
        self.pool
            .clone()
            .create_node_group(CreateNodeGroupRequest {
                name: name.to_owned(),
                node_skeleton_yaml: skeleton_yaml.to_owned(),
                count,
                provisioning_json: String::new(),
            })
            .await
            .map_err(|status| MeshError::Call {
                service: "pool",
                status,
            })?;
        Ok(())
    }

    /// Sets what running pods use; the pool answers how many it runs.
    pub async fn set_pod_usage(
        &self,
        pods: Vec<PodUsage>,
    ) -> Result<SetPodUsageResponse, MeshError> {
        self.pool
            .clone()
            .set_pod_usage(SetPodUsageRequest { pods })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| MeshError::Call {
                service: "pool",
                status,
            })
    }

    /// Every node of the pool's, or of one group, sorted by name.
    pub async fn list_nodes(&self, group: &str) -> Result<Vec<Node>, MeshError> {
        let mut nodes = Vec::new();
        let mut page_token = String::new();
        loop {
            let page = self
                .pool
                .clone()
                .list_nodes(ListNodesRequest {
                    node_group: group.to_owned(),
                    page_size: 0,
                    page_token,
                })
                .await
                .map_err(pool_call)?
                .into_inner();
            nodes.extend(page.nodes);
            if page.next_page_token.is_empty() {
                return Ok(nodes);
            }
            page_token = page.next_page_token;
        }
    }

    /// Stops the named nodes' kubelets (see the pool's FailNodes).
    pub async fn fail_nodes(&self, node_names: Vec<String>) -> Result<(), MeshError> {
        self.pool
            .clone()
            .fail_nodes(FailNodesRequest { node_names })
            .await
            .map_err(pool_call)?;
        Ok(())
    }

    /// Brings failed nodes back.
    pub async fn recover_nodes(&self, node_names: Vec<String>) -> Result<(), MeshError> {
        self.pool
            .clone()
            .recover_nodes(RecoverNodesRequest { node_names })
            .await
            .map_err(pool_call)?;
        Ok(())
    }

    /// The lease the pool's nodes hold from now on; `None`: the pool's own.
    pub async fn set_node_lease(
        &self,
        lease: Option<std::time::Duration>,
    ) -> Result<(), MeshError> {
        let duration = lease.and_then(|lease| prost_types::Duration::try_from(lease).ok());
        self.pool
            .clone()
            .set_node_lease(SetNodeLeaseRequest { duration })
            .await
            .map_err(pool_call)?;
        Ok(())
    }

    /// Deletes a pool-managed group; one already gone (or never created) counts as deleted.
    /// The pool answers an unknown group with INVALID_ARGUMENT, its one code for bad names.
    pub async fn delete_node_group(&self, name: &str) -> Result<(), MeshError> {
        match self
            .pool
            .clone()
            .delete_node_group(DeleteNodeGroupRequest {
                name: name.to_owned(),
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::NotFound | tonic::Code::InvalidArgument
                ) =>
            {
                Ok(())
            }
            Err(status) => Err(MeshError::Call {
                service: "pool",
                status,
            }),
        }
    }

    /// The cloud provider's price of a node-hour of `instance_type`, as CA's price expander
    /// gets it; `None` when there is no provider or it has no price for that type (a cost is
    /// then "no price", never a guess).
    pub async fn node_price_per_hour(&self, instance_type: &str) -> Option<f64> {
        let mut cloud_provider = self.cloud_provider.clone()?;
        let start = std::time::SystemTime::UNIX_EPOCH;
        let end = start + std::time::Duration::from_secs(3600);
        let request = PricingNodePriceRequest {
            node: Some(ExternalGrpcNode {
                labels: [(
                    ksim_nodes::labels::INSTANCE_TYPE_LABEL.to_owned(),
                    instance_type.to_owned(),
                )]
                .into(),
                ..ExternalGrpcNode::default()
            }),
            start_timestamp: Some(prost_types::Timestamp::from(start)),
            end_timestamp: Some(prost_types::Timestamp::from(end)),
            ..PricingNodePriceRequest::default()
        };
        match cloud_provider.pricing_node_price(request).await {
            Ok(response) => Some(response.into_inner().price),
            Err(status) => {
                tracing::debug!(instance_type, %status, "no price");
                None
            }
        }
    }

    /// Whether an environment runs the scheduler and CA for the driver.
    pub fn has_environment(&self) -> bool {
        self.environment.is_some()
    }

    /// How the environment would run `run`, judged by the real binaries; nothing changes.
    pub async fn check_configuration(
        &self,
        run: env::Run,
    ) -> Result<env::AppliedConfiguration, MeshError> {
        let mut environment = self.environment()?;
        let response = environment
            .check_configuration(CheckConfigurationRequest { run: Some(run) })
            .await
            .map_err(environment_error)?;
        Ok(response.into_inner().configuration.unwrap_or_default())
    }

    /// Has the environment run the scheduler and CA as `run` asks; how they run now.
    pub async fn apply_configuration(
        &self,
        run: env::Run,
    ) -> Result<env::AppliedConfiguration, MeshError> {
        let mut environment = self.environment()?;
        let response = environment
            .apply_configuration(ApplyConfigurationRequest { run: Some(run) })
            .await
            .map_err(environment_error)?;
        Ok(response.into_inner().configuration.unwrap_or_default())
    }

    /// Has the environment run the scheduler and CA as it started them.
    pub async fn restore_defaults(&self) -> Result<(), MeshError> {
        self.environment()?
            .restore_defaults(RestoreDefaultsRequest {})
            .await
            .map_err(environment_error)?;
        Ok(())
    }

    /// cluster-autoscaler's outages not over by `since`, oldest first, and the cloud
    /// provider's.
    pub async fn autoscaler_outages(
        &self,
        since: prost_types::Timestamp,
    ) -> Result<env::ListAutoscalerOutagesResponse, MeshError> {
        let response = self
            .environment()?
            .list_autoscaler_outages(ListAutoscalerOutagesRequest { since: Some(since) })
            .await
            .map_err(environment_error)?;
        Ok(response.into_inner())
    }

    /// cluster-autoscaler's unremovable nodes per reason, as its gauge stands now. `None`: the
    /// environment runs no CA (FAILED_PRECONDITION), or is older than the call
    /// (UNIMPLEMENTED): there is nothing to read.
    pub async fn unremovable_nodes(
        &self,
    ) -> Result<Option<env::GetUnremovableNodesResponse>, MeshError> {
        match self
            .environment()?
            .get_unremovable_nodes(GetUnremovableNodesRequest {})
            .await
        {
            Ok(response) => Ok(Some(response.into_inner())),
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::Unimplemented
                ) =>
            {
                Ok(None)
            }
            Err(status) => Err(environment_error(status)),
        }
    }

    fn environment(&self) -> Result<EnvironmentClient<Traced>, MeshError> {
        self.environment
            .clone()
            .ok_or(MeshError::NotConfigured("environment"))
    }

    /// The node group ids the cloud provider offers cluster-autoscaler; `None` without one.
    pub async fn autoscaler_groups(&self) -> Result<Option<Vec<String>>, MeshError> {
        let Some(mut cloud_provider) = self.cloud_provider.clone() else {
            return Ok(None);
        };
        let groups = cloud_provider
            .node_groups(NodeGroupsRequest {})
            .await
            .map_err(|status| MeshError::Call {
                service: "cloud provider",
                status,
            })?
            .into_inner();
        Ok(Some(groups.node_groups.into_iter().map(|g| g.id).collect()))
    }

    /// Whether the cloud provider answers GetOptions for `group` with options, as CA asks it;
    /// `false` when it answers UNIMPLEMENTED (CA then uses its flags), fails, or there is no
    /// provider.
    pub async fn answers_group_options(&self, group: &str) -> bool {
        let Some(mut cloud_provider) = self.cloud_provider.clone() else {
            return false;
        };
        let request = NodeGroupAutoscalingOptionsRequest {
            id: group.to_owned(),
            defaults: Some(NodeGroupAutoscalingOptions::default()),
        };
        match cloud_provider.node_group_get_options(request).await {
            Ok(_) => true,
            Err(status) => {
                tracing::debug!(group, %status, "no per-group options");
                false
            }
        }
    }
}

fn environment_error(status: tonic::Status) -> MeshError {
    MeshError::Call {
        service: "environment",
        status,
    }
}
