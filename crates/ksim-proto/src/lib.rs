//! Generated protobuf messages, and with the `grpc` feature (on by default) tonic clients and
//! servers, for ksim's gRPC APIs and for cluster-autoscaler's externalgrpc cloud provider API.
//!
//! Modules mirror the protobuf packages, so `ksim.trace.v1` is
//! [`ksim::trace::v1`]. The sources are the `.proto` files in the workspace's
//! `proto/` directory, compiled by `build.rs`.

/// Encoded `google.protobuf.FileDescriptorSet` of every `.proto` file in the
/// workspace's `proto/` directory, including the well-known types they import
/// and their comments. Serve it through gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/ksim_descriptor.bin"));

pub mod json;

/// ksim's own APIs.
pub mod ksim {
    /// The tracer store API and the trace file schema.
    pub mod trace {
        /// Version 1.
        // Generated code spells out paths the workspace lints call unnecessary,
        // and is not ours to restyle.
        #[allow(unused_qualifications)]
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/ksim.trace.v1.rs"));
        }
    }

    /// The virtual node pool API.
    pub mod vnode {
        /// Version 1.
        // Generated code: see ksim::trace::v1.
        #[allow(unused_qualifications)]
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/ksim.vnode.v1.rs"));
        }
    }

    /// The local environment's API: the configuration under test.
    pub mod env {
        /// Version 1.
        // Generated code: see ksim::trace::v1.
        #[allow(unused_qualifications)]
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/ksim.env.v1.rs"));
        }
    }

    /// The driver API.
    pub mod driver {
        /// Version 1.
        // Generated code: see ksim::trace::v1.
        #[allow(unused_qualifications)]
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/ksim.driver.v1.rs"));
        }
    }
}

/// cluster-autoscaler's APIs.
pub mod clusterautoscaler {
    /// Cloud provider APIs.
    pub mod cloudprovider {
        /// Version 1.
        pub mod v1 {
            /// The externalgrpc cloud provider API, wire-compatible with
            /// cluster-autoscaler 1.29 - 1.36.
            // Generated code: see ksim::trace::v1.
            #[allow(unused_qualifications)]
            pub mod externalgrpc {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/clusterautoscaler.cloudprovider.v1.externalgrpc.rs"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use prost::Message;
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{DescriptorProto, FileDescriptorSet, ServiceDescriptorProto};

    use super::FILE_DESCRIPTOR_SET;
    use super::clusterautoscaler::cloudprovider::v1::externalgrpc as ca;
    use super::ksim::trace::v1 as trace;

    type TestResult = Result<(), Box<dyn Error>>;

    const CA_PACKAGE: &str = "clusterautoscaler.cloudprovider.v1.externalgrpc";

    fn descriptor_set() -> Result<FileDescriptorSet, Box<dyn Error>> {
        Ok(FileDescriptorSet::decode(FILE_DESCRIPTOR_SET)?)
    }

    fn service<'a>(
        fds: &'a FileDescriptorSet,
        package: &str,
        name: &str,
    ) -> Result<&'a ServiceDescriptorProto, String> {
        fds.file
            .iter()
            .filter(|file| file.package() == package)
            .flat_map(|file| file.service.iter())
            .find(|service| service.name() == name)
            .ok_or_else(|| format!("service {package}.{name} missing from the descriptor set"))
    }

    fn message<'a>(
        fds: &'a FileDescriptorSet,
        package: &str,
        name: &str,
    ) -> Result<&'a DescriptorProto, String> {
        fds.file
            .iter()
            .filter(|file| file.package() == package)
            .flat_map(|file| file.message_type.iter())
            .find(|message| message.name() == name)
            .ok_or_else(|| format!("message {package}.{name} missing from the descriptor set"))
    }

    #[test]
    fn descriptor_set_has_every_service_with_its_methods() -> TestResult {
        let fds = descriptor_set()?;
        for (package, name, methods) in [
            ("ksim.trace.v1", "TraceStore", 4),
            ("ksim.vnode.v1", "VirtualNodePool", 11),
            ("ksim.driver.v1", "Driver", 5),
            (CA_PACKAGE, "CloudProvider", 15),
        ] {
            let service = service(&fds, package, name)?;
            assert_eq!(service.method.len(), methods, "methods of {package}.{name}");
        }
        // Reflection resolves imports inside the set, so they must be in it.
        for import in [
            "google/protobuf/timestamp.proto",
            "google/protobuf/duration.proto",
        ] {
            assert!(
                fds.file.iter().any(|file| file.name() == import),
                "{import} missing from the descriptor set"
            );
        }
        Ok(())
    }

    #[test]
    fn streaming_rpcs_stream_in_the_right_direction() -> TestResult {
        let fds = descriptor_set()?;
        for (package, service_name, method_name, client_streaming, server_streaming) in [
            ("ksim.trace.v1", "TraceStore", "Export", false, true),
            ("ksim.trace.v1", "TraceStore", "Import", true, false),
            ("ksim.trace.v1", "TraceStore", "Stats", false, false),
            ("ksim.driver.v1", "Driver", "WatchSimulation", false, true),
            ("ksim.driver.v1", "Driver", "StartSimulation", false, false),
        ] {
            let method = service(&fds, package, service_name)?
                .method
                .iter()
                .find(|method| method.name() == method_name)
                .ok_or_else(|| format!("{service_name}.{method_name} missing"))?;
            assert_eq!(method.client_streaming(), client_streaming, "{method_name}");
            assert_eq!(method.server_streaming(), server_streaming, "{method_name}");
        }
        Ok(())
    }

    #[test]
    fn cloud_provider_methods_match_cluster_autoscaler() -> TestResult {
        let fds = descriptor_set()?;
        let service = service(&fds, CA_PACKAGE, "CloudProvider")?;
        // Method, request and response names as cluster-autoscaler declares them;
        // they form the wire path and must not drift.
        let expected = [
            ("NodeGroups", "NodeGroupsRequest", "NodeGroupsResponse"),
            (
                "NodeGroupForNode",
                "NodeGroupForNodeRequest",
                "NodeGroupForNodeResponse",
            ),
            (
                "PricingNodePrice",
                "PricingNodePriceRequest",
                "PricingNodePriceResponse",
            ),
            (
                "PricingPodPrice",
                "PricingPodPriceRequest",
                "PricingPodPriceResponse",
            ),
            ("GPULabel", "GPULabelRequest", "GPULabelResponse"),
            (
                "GetAvailableGPUTypes",
                "GetAvailableGPUTypesRequest",
                "GetAvailableGPUTypesResponse",
            ),
            ("Cleanup", "CleanupRequest", "CleanupResponse"),
            ("Refresh", "RefreshRequest", "RefreshResponse"),
            (
                "NodeGroupTargetSize",
                "NodeGroupTargetSizeRequest",
                "NodeGroupTargetSizeResponse",
            ),
            (
                "NodeGroupIncreaseSize",
                "NodeGroupIncreaseSizeRequest",
                "NodeGroupIncreaseSizeResponse",
            ),
            (
                "NodeGroupDeleteNodes",
                "NodeGroupDeleteNodesRequest",
                "NodeGroupDeleteNodesResponse",
            ),
            (
                "NodeGroupDecreaseTargetSize",
                "NodeGroupDecreaseTargetSizeRequest",
                "NodeGroupDecreaseTargetSizeResponse",
            ),
            (
                "NodeGroupNodes",
                "NodeGroupNodesRequest",
                "NodeGroupNodesResponse",
            ),
            (
                "NodeGroupTemplateNodeInfo",
                "NodeGroupTemplateNodeInfoRequest",
                "NodeGroupTemplateNodeInfoResponse",
            ),
            (
                "NodeGroupGetOptions",
                "NodeGroupAutoscalingOptionsRequest",
                "NodeGroupAutoscalingOptionsResponse",
            ),
        ];
        assert_eq!(service.method.len(), expected.len());
        for (method, (name, input, output)) in service.method.iter().zip(expected) {
            assert_eq!(method.name(), name);
            assert_eq!(
                method.input_type(),
                format!(".{CA_PACKAGE}.{input}"),
                "{name}"
            );
            assert_eq!(
                method.output_type(),
                format!(".{CA_PACKAGE}.{output}"),
                "{name}"
            );
            assert!(
                !method.client_streaming() && !method.server_streaming(),
                "{name}"
            );
        }
        Ok(())
    }

    /// Turns a type as the spec writes it ("int32", "repeated Instance",
    /// "map<string,string>", "google.protobuf.Duration") into the descriptor's
    /// label, type and (for messages and enums) fully qualified type name.
    fn spec_type(spec: &str) -> (Label, Type, Option<String>) {
        let (label, name) = match spec.strip_prefix("repeated ") {
            Some(name) => (Label::Repeated, name),
            None => (Label::Optional, spec),
        };
        let scalar = match name {
            "string" => Some(Type::String),
            "int32" => Some(Type::Int32),
            "double" => Some(Type::Double),
            "bool" => Some(Type::Bool),
            "bytes" => Some(Type::Bytes),
            _ => None,
        };
        if let Some(scalar) = scalar {
            return (label, scalar, None);
        }
        // A map is a repeated message of a synthesized entry type.
        if name.starts_with("map<") {
            return (Label::Repeated, Type::Message, None);
        }
        let full = if name.starts_with("google.protobuf.") {
            format!(".{name}")
        } else {
            format!(".{CA_PACKAGE}.{name}")
        };
        let ty = if name.ends_with("InstanceState") {
            Type::Enum
        } else {
            Type::Message
        };
        (label, ty, Some(full))
    }

    #[test]
    fn cloud_provider_fields_match_cluster_autoscaler() -> TestResult {
        let fds = descriptor_set()?;
        // Every field of the externalgrpc API as the spec lists it. The legacy
        // k8s-typed fields are bytes, identical on the wire to the k8s message.
        let expected = [
            ("NodeGroup", "id", 1, "string"),
            ("NodeGroup", "minSize", 2, "int32"),
            ("NodeGroup", "maxSize", 3, "int32"),
            ("NodeGroup", "debug", 4, "string"),
            ("ExternalGrpcNode", "providerID", 1, "string"),
            ("ExternalGrpcNode", "name", 2, "string"),
            ("ExternalGrpcNode", "labels", 3, "map<string,string>"),
            ("ExternalGrpcNode", "annotations", 4, "map<string,string>"),
            ("NodeGroupsResponse", "nodeGroups", 1, "repeated NodeGroup"),
            ("NodeGroupForNodeRequest", "node", 1, "ExternalGrpcNode"),
            ("NodeGroupForNodeResponse", "nodeGroup", 1, "NodeGroup"),
            ("PricingNodePriceRequest", "node", 1, "ExternalGrpcNode"),
            ("PricingNodePriceRequest", "startTime", 2, "bytes"),
            ("PricingNodePriceRequest", "endTime", 3, "bytes"),
            (
                "PricingNodePriceRequest",
                "startTimestamp",
                4,
                "google.protobuf.Timestamp",
            ),
            (
                "PricingNodePriceRequest",
                "endTimestamp",
                5,
                "google.protobuf.Timestamp",
            ),
            ("PricingNodePriceResponse", "price", 1, "double"),
            ("PricingPodPriceRequest", "pod", 1, "bytes"),
            ("PricingPodPriceRequest", "startTime", 2, "bytes"),
            ("PricingPodPriceRequest", "endTime", 3, "bytes"),
            ("PricingPodPriceRequest", "pod_bytes", 4, "bytes"),
            (
                "PricingPodPriceRequest",
                "startTimestamp",
                5,
                "google.protobuf.Timestamp",
            ),
            (
                "PricingPodPriceRequest",
                "endTimestamp",
                6,
                "google.protobuf.Timestamp",
            ),
            ("PricingPodPriceResponse", "price", 1, "double"),
            ("GPULabelResponse", "label", 1, "string"),
            (
                "GetAvailableGPUTypesResponse",
                "gpuTypes",
                1,
                "map<string,Any>",
            ),
            ("NodeGroupTargetSizeRequest", "id", 1, "string"),
            ("NodeGroupTargetSizeResponse", "targetSize", 1, "int32"),
            ("NodeGroupIncreaseSizeRequest", "delta", 1, "int32"),
            ("NodeGroupIncreaseSizeRequest", "id", 2, "string"),
            (
                "NodeGroupDeleteNodesRequest",
                "nodes",
                1,
                "repeated ExternalGrpcNode",
            ),
            ("NodeGroupDeleteNodesRequest", "id", 2, "string"),
            ("NodeGroupDecreaseTargetSizeRequest", "delta", 1, "int32"),
            ("NodeGroupDecreaseTargetSizeRequest", "id", 2, "string"),
            ("NodeGroupNodesRequest", "id", 1, "string"),
            (
                "NodeGroupNodesResponse",
                "instances",
                1,
                "repeated Instance",
            ),
            ("Instance", "id", 1, "string"),
            ("Instance", "status", 2, "InstanceStatus"),
            (
                "InstanceStatus",
                "instanceState",
                1,
                "InstanceStatus.InstanceState",
            ),
            ("InstanceStatus", "errorInfo", 2, "InstanceErrorInfo"),
            ("InstanceErrorInfo", "errorCode", 1, "string"),
            ("InstanceErrorInfo", "errorMessage", 2, "string"),
            ("InstanceErrorInfo", "instanceErrorClass", 3, "int32"),
            ("NodeGroupTemplateNodeInfoRequest", "id", 1, "string"),
            ("NodeGroupTemplateNodeInfoResponse", "nodeInfo", 1, "bytes"),
            ("NodeGroupTemplateNodeInfoResponse", "nodeBytes", 2, "bytes"),
            (
                "NodeGroupAutoscalingOptions",
                "scaleDownUtilizationThreshold",
                1,
                "double",
            ),
            (
                "NodeGroupAutoscalingOptions",
                "scaleDownGpuUtilizationThreshold",
                2,
                "double",
            ),
            (
                "NodeGroupAutoscalingOptions",
                "scaleDownUnneededTime",
                3,
                "bytes",
            ),
            (
                "NodeGroupAutoscalingOptions",
                "scaleDownUnreadyTime",
                4,
                "bytes",
            ),
            (
                "NodeGroupAutoscalingOptions",
                "MaxNodeProvisionTime",
                5,
                "bytes",
            ),
            (
                "NodeGroupAutoscalingOptions",
                "zeroOrMaxNodeScaling",
                6,
                "bool",
            ),
            (
                "NodeGroupAutoscalingOptions",
                "ignoreDaemonSetsUtilization",
                7,
                "bool",
            ),
            (
                "NodeGroupAutoscalingOptions",
                "scaleDownUnneededDuration",
                8,
                "google.protobuf.Duration",
            ),
            (
                "NodeGroupAutoscalingOptions",
                "scaleDownUnreadyDuration",
                9,
                "google.protobuf.Duration",
            ),
            (
                "NodeGroupAutoscalingOptions",
                "MaxNodeProvisionDuration",
                10,
                "google.protobuf.Duration",
            ),
            ("NodeGroupAutoscalingOptionsRequest", "id", 1, "string"),
            (
                "NodeGroupAutoscalingOptionsRequest",
                "defaults",
                2,
                "NodeGroupAutoscalingOptions",
            ),
            (
                "NodeGroupAutoscalingOptionsResponse",
                "nodeGroupAutoscalingOptions",
                1,
                "NodeGroupAutoscalingOptions",
            ),
        ];
        for (message_name, field_name, number, spec) in expected {
            let what = format!("{message_name}.{field_name}");
            let field = message(&fds, CA_PACKAGE, message_name)?
                .field
                .iter()
                .find(|field| field.name() == field_name)
                .ok_or_else(|| format!("{what} missing"))?;
            let (label, ty, type_name) = spec_type(spec);
            assert_eq!(field.number(), number, "{what} number");
            assert_eq!(field.label(), label, "{what} label");
            assert_eq!(field.r#type(), ty, "{what} type");
            if let Some(type_name) = type_name {
                assert_eq!(field.type_name(), type_name, "{what} type name");
            }
        }
        // No field beyond the spec's may sneak in: CA would not know it.
        for file in fds.file.iter().filter(|file| file.package() == CA_PACKAGE) {
            for message in &file.message_type {
                let listed = expected.iter().filter(|entry| entry.0 == message.name());
                assert_eq!(message.field.len(), listed.count(), "{}", message.name());
            }
        }
        Ok(())
    }

    #[test]
    fn instance_state_values_match_cluster_autoscaler() {
        use ca::instance_status::InstanceState;
        assert_eq!(InstanceState::Unspecified as i32, 0);
        assert_eq!(InstanceState::InstanceRunning as i32, 1);
        assert_eq!(InstanceState::InstanceCreating as i32, 2);
        assert_eq!(InstanceState::InstanceDeleting as i32, 3);
        assert_eq!(
            InstanceState::InstanceRunning.as_str_name(),
            "instanceRunning"
        );
    }

    #[test]
    fn node_group_for_node_request_encodes_with_spec_field_tags() -> TestResult {
        let request = ca::NodeGroupForNodeRequest {
            node: Some(ca::ExternalGrpcNode {
                provider_id: "ksim://g/n".to_owned(),
                name: "n".to_owned(),
                ..Default::default()
            }),
        };
        // Tag byte = field number << 3 | wire type 2 (length-delimited).
        let mut node = vec![0x0a, 10];
        node.extend_from_slice(b"ksim://g/n"); // providerID = 1
        node.extend_from_slice(&[0x12, 1, b'n']); // name = 2
        let mut expected = vec![0x0a, u8::try_from(node.len())?]; // node = 1
        expected.extend_from_slice(&node);
        assert_eq!(request.encode_to_vec(), expected);
        assert_eq!(
            ca::NodeGroupForNodeRequest::decode(expected.as_slice())?,
            request
        );
        Ok(())
    }

    #[test]
    fn template_node_info_fills_legacy_and_new_fields_on_the_wire() -> TestResult {
        let node = b"\x0a\x03\x0a\x01x".to_vec(); // a stand-in for an encoded v1.Node
        let response = ca::NodeGroupTemplateNodeInfoResponse {
            node_info: node.clone(),
            node_bytes: node.clone(),
        };
        let mut expected = vec![0x0a, 5]; // nodeInfo = 1
        expected.extend_from_slice(&node);
        expected.extend_from_slice(&[0x12, 5]); // nodeBytes = 2
        expected.extend_from_slice(&node);
        assert_eq!(response.encode_to_vec(), expected);
        Ok(())
    }

    #[test]
    fn legacy_bytes_field_reads_an_embedded_message_unchanged() -> TestResult {
        // CA <= 1.34 sends startTime as an embedded meta/v1 Time message; field 2
        // must come through as its raw bytes: seconds = 1 (varint 7), nanos = 2 (varint 5).
        let time = [0x08, 7, 0x10, 5];
        let mut wire = vec![0x12, 4];
        wire.extend_from_slice(&time);
        let request = ca::PricingNodePriceRequest::decode(wire.as_slice())?;
        assert_eq!(request.start_time, time);
        assert!(request.node.is_none() && request.start_timestamp.is_none());
        Ok(())
    }

    #[test]
    fn trace_records_round_trip_as_length_delimited_stream() -> TestResult {
        let gvk = trace::GroupVersionKind {
            group: "apps".to_owned(),
            version: "v1".to_owned(),
            kind: "Deployment".to_owned(),
        };
        let records = [
            trace::TraceRecord {
                record: Some(trace::trace_record::Record::Header(trace::TraceHeader {
                    format_version: 1,
                    tracer_config: Some(trace::TracerConfig {
                        tracked_kinds: vec![trace::TrackedKindConfig {
                            gvk: Some(gvk.clone()),
                            plural: "deployments".to_owned(),
                            namespaced: true,
                            pod_template_paths: vec!["/spec/template".to_owned()],
                            track_lifecycles: true,
                            skip_owned: false,
                        }],
                        cluster_recorded: false,
                        ..Default::default()
                    }),
                    ..Default::default()
                })),
            },
            trace::TraceRecord {
                record: Some(trace::trace_record::Record::Event(trace::TraceEvent {
                    timestamp_ms: 1_700_000_000_123,
                    applied: vec![trace::TraceObject {
                        gvk: Some(gvk),
                        namespace: "default".to_owned(),
                        name: "web".to_owned(),
                        object_json: br#"{"kind":"Deployment"}"#.to_vec(),
                    }],
                    deleted: Vec::new(),
                })),
            },
            trace::TraceRecord {
                record: Some(trace::trace_record::Record::Trailer(trace::TraceTrailer {
                    event_count: 1,
                    lifecycle_count: 0,
                    object_count: 1,
                    ..Default::default()
                })),
            },
        ];
        let mut file = Vec::new();
        for record in &records {
            record.encode_length_delimited(&mut file)?;
        }
        let mut rest = file.as_slice();
        let mut decoded = Vec::new();
        while !rest.is_empty() {
            decoded.push(trace::TraceRecord::decode_length_delimited(&mut rest)?);
        }
        assert_eq!(decoded, records);
        Ok(())
    }
}
