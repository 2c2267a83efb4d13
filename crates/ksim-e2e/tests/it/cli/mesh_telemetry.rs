//! One OpenTelemetry trace per simulation across the mesh: `ksim up` with the standard OTLP
//! endpoint pointed at a receiver in this test, one `ksim run` that makes the driver call the
//! tracer store, the pool and the cloud provider, and the spans the services export.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
    trace_service_server::{TraceService, TraceServiceServer},
};
use tonic::{Request, Response, Status};

/// (service.name, span name) per trace id.
type Received = Arc<Mutex<BTreeMap<Vec<u8>, BTreeSet<(String, String)>>>>;

#[derive(Clone, Default)]
struct Receiver {
    received: Received,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut received = self.received.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(
                        opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s),
                    ) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    received
                        .entry(span.trace_id.clone())
                        .or_default()
                        .insert((service.clone(), span.name.clone()));
                }
            }
        }
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

fn ksim(state_dir: &Path) -> Command {
    let mut command = Command::new(ksim_e2e::binary("ksim"));
    command.env("KSIM_STATE_DIR", state_dir);
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn a_simulation_is_one_trace_across_driver_tracer_pool_and_cloud_provider() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );

    let state = tempfile::tempdir().unwrap();
    // With cluster-autoscaler, as `--autoscaler` runs expect: CA's calls reach the provider.
    let mut up = ksim(state.path())
        .args(["up", "--autoscaler", "--port-base"])
        .arg(ksim_e2e::port_base().to_string())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !state.path().join("env.json").exists() {
        if let Some(status) = up.try_wait().unwrap() {
            let output = up.wait_with_output().unwrap();
            panic!(
                "ksim up exited ({status}): {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "ksim up took too long"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let skeleton = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/vnode/examples/skeleton-m5-large.yaml");
    let skeleton = skeleton.to_str().unwrap();
    let now = std::time::SystemTime::now();
    let rfc3339 = |t: std::time::SystemTime| humantime::format_rfc3339(t).to_string();
    let run = ksim(state.path())
        .args(["run", "--stored", "--start"])
        .arg(rfc3339(now - Duration::from_secs(60)))
        .arg("--end")
        .arg(rfc3339(now))
        .args(["--node-group", &format!("fixed={skeleton}:1")])
        .args(["--autoscaler-group", &format!("scaled={skeleton}:1:2:1")])
        // No --driver: `ksim run` finds this environment's in its env.json.
        .arg("--autoscaler")
        .args(["--provisioning", "instant"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );

    // Stopping the services flushes their span exporters.
    let down = ksim(state.path()).arg("down").output().unwrap();
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    up.wait().unwrap();

    let received = receiver.received.lock().unwrap();
    let trace = received
        .values()
        .find(|spans| {
            spans.contains(&(
                "ksim-driver".to_owned(),
                "ksim.driver.v1.Driver/StartSimulation".to_owned(),
            ))
        })
        .unwrap_or_else(|| panic!("no StartSimulation span among {received:#?}"));
    for (service, span) in [
        ("ksim-driver", "simulation"),
        ("ksim-tracer", "ksim.trace.v1.TraceStore/Export"),
        (
            "ksim-vnode",
            "ksim.vnode.v1.VirtualNodePool/CreateNodeGroup",
        ),
        (
            "ksim-cloudprov",
            "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroups",
        ),
    ] {
        assert!(
            trace.contains(&(service.to_owned(), span.to_owned())),
            "{service} {span} missing from the simulation's trace: {trace:#?}"
        );
    }
}
