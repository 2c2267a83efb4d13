//! Per-message size limits, so an oversized request is refused before it is decoded.

use crate::MessageLimits;
use ksim_proto::{
    clusterautoscaler::cloudprovider::v1::externalgrpc::cloud_provider_server::{
        CloudProvider, CloudProviderServer,
    },
    ksim::{
        driver::v1::driver_server::{Driver, DriverServer},
        env::v1::environment_server::{Environment, EnvironmentServer},
        trace::v1::trace_store_server::{TraceStore, TraceStoreServer},
        vnode::v1::virtual_node_pool_server::{VirtualNodePool, VirtualNodePoolServer},
    },
};
use tonic_health::pb::health_server::{Health, HealthServer};

/// A generated tonic server whose message sizes can be capped. Generated servers share the
/// methods but no trait, so each one the project serves is listed here.
pub trait LimitedService {
    fn with_limits(self, limits: MessageLimits) -> Self;
}

macro_rules! limited {
    ($($server:ident<$handler:ident>),+ $(,)?) => {$(
        impl<T: $handler> LimitedService for $server<T> {
            fn with_limits(self, limits: MessageLimits) -> Self {
                self.max_decoding_message_size(limits.max_request_bytes)
                    .max_encoding_message_size(limits.max_response_bytes)
            }
        }
    )+};
}

limited!(
    HealthServer<Health>,
    TraceStoreServer<TraceStore>,
    VirtualNodePoolServer<VirtualNodePool>,
    DriverServer<Driver>,
    EnvironmentServer<Environment>,
    CloudProviderServer<CloudProvider>,
);
