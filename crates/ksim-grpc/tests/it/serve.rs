//! A server built by the runtime, exercised over real sockets.
// Test helpers may unwrap too: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{net::SocketAddr, time::Duration};

use ksim_grpc::{GrpcServer, ServeArgs, TlsArgs};
use ksim_localenv::pki::CertificateAuthority;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::oneshot,
    task::JoinHandle,
};
use tokio_stream::StreamExt;
use tonic::{
    Code,
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity},
};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tonic_reflection::pb::{v1, v1alpha};

struct Running {
    grpc: SocketAddr,
    admin: SocketAddr,
    stop: oneshot::Sender<()>,
    served: JoinHandle<Result<(), ksim_grpc::Error>>,
}

async fn start(args: ServeArgs) -> Running {
    let bound = GrpcServer::new(args).bind().await.unwrap();
    let (grpc, admin) = (bound.grpc_addr().unwrap(), bound.admin_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(bound.serve_until(async {
        let _ = stopped.await;
    }));
    Running {
        grpc,
        admin,
        stop,
        served,
    }
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn check(
    client: &mut HealthClient<Channel>,
    service: &str,
) -> Result<ServingStatus, tonic::Status> {
    let response = client
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await?;
    Ok(response.into_inner().status())
}

#[tokio::test]
async fn health_answers_serving_over_a_real_socket() {
    let server = start(ServeArgs::ephemeral()).await;
    let mut health = HealthClient::new(channel(server.grpc).await);
    assert_eq!(
        check(&mut health, "").await.unwrap(),
        ServingStatus::Serving
    );
    let unknown = check(&mut health, "no.such.Service").await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}

#[tokio::test]
async fn reflection_v1_and_v1alpha_list_health_and_reflection() {
    let server = start(ServeArgs::ephemeral()).await;
    let channel = channel(server.grpc).await;

    let mut v1alpha =
        v1alpha::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut responses = v1alpha
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.next().await.unwrap().unwrap();
    let Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        response.message_response
    else {
        panic!("unexpected reflection answer: {response:?}");
    };
    let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"grpc.health.v1.Health".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.reflection.v1alpha.ServerReflection".to_owned()),
        "{names:?}"
    );
    // Only what this server runs is advertised, not every API in the descriptor set.
    assert!(
        !names.iter().any(|name| name.starts_with("ksim.")),
        "{names:?}"
    );

    let mut v1 = v1::server_reflection_client::ServerReflectionClient::new(channel);
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1::server_reflection_request::MessageRequest::FileContainingSymbol(
                "grpc.health.v1.Health".to_owned(),
            ),
        ),
    };
    let mut responses = v1
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.next().await.unwrap().unwrap();
    assert!(
        matches!(
            response.message_response,
            Some(v1::server_reflection_response::MessageResponse::FileDescriptorResponse(ref files))
                if !files.file_descriptor_proto.is_empty()
        ),
        "{response:?}"
    );
}

#[tokio::test]
async fn admin_port_serves_healthz_and_metrics() {
    let server = start(ServeArgs::ephemeral()).await;
    let healthz = http_get(server.admin, "/healthz").await;
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    assert!(healthz.ends_with("ok\n"), "{healthz}");
    let metrics = http_get(server.admin, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("application/openmetrics-text"),
        "{metrics}"
    );
    assert!(metrics.contains("# EOF"), "{metrics}");

    // Each method's calls are counted by their code: a health check answered, and one of a
    // service this server does not run (NOT_FOUND).
    let mut health = HealthClient::new(channel(server.grpc).await);
    check(&mut health, "").await.unwrap();
    check(&mut health, "no.Such").await.unwrap_err();
    let metrics = http_get(server.admin, "/metrics").await;
    for line in [
        r#"ksim_grpc_server_handled_total{grpc_service="grpc.health.v1.Health",grpc_method="Check",grpc_code="OK"} 1"#,
        r#"ksim_grpc_server_handled_total{grpc_service="grpc.health.v1.Health",grpc_method="Check",grpc_code="NotFound"} 1"#,
        r#"ksim_grpc_server_handling_seconds_count{grpc_service="grpc.health.v1.Health",grpc_method="Check"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line}\nnot in\n{metrics}");
    }
}

#[tokio::test]
async fn oversized_requests_are_refused_before_decoding() {
    let mut args = ServeArgs::ephemeral();
    args.limits.max_request_bytes = 1024;
    let server = start(args).await;
    let mut health = HealthClient::new(channel(server.grpc).await);
    let status = check(&mut health, &"x".repeat(4096)).await.unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status}");
    assert!(status.message().contains("too large"), "{status}");
}

#[tokio::test]
async fn shutdown_reports_not_serving_then_stops() {
    let server = start(ServeArgs::ephemeral()).await;
    let mut health = HealthClient::new(channel(server.grpc).await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.next().await.unwrap().unwrap().status(),
        ServingStatus::Serving
    );

    server.stop.send(()).unwrap();
    assert_eq!(
        watch.next().await.unwrap().unwrap().status(),
        ServingStatus::NotServing
    );
    // The watch stream stays open, so only the grace period lets the server finish.
    let served = tokio::time::timeout(Duration::from_secs(30), server.served).await;
    served.unwrap().unwrap().unwrap();
    assert!(
        TcpStream::connect(server.grpc).await.is_err(),
        "port still open"
    );
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate_from_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::create(dir.path(), "test-ca").unwrap();
    let serving = ca
        .server_cert("server", &["localhost"], &["127.0.0.1".parse().unwrap()])
        .unwrap();
    let client = ca.client_cert("client", "test-client", None).unwrap();
    let mut args = ServeArgs::ephemeral();
    args.tls = TlsArgs {
        tls_cert: Some(serving.cert),
        tls_key: Some(serving.key),
        tls_client_ca: Some(ca.cert_file().to_owned()),
    };
    let server = start(args).await;
    let ca_pem = Certificate::from_pem(std::fs::read(ca.cert_file()).unwrap());
    let endpoint =
        Endpoint::from_shared(format!("https://localhost:{}", server.grpc.port())).unwrap();

    let identity = Identity::from_pem(
        std::fs::read(client.cert).unwrap(),
        std::fs::read(client.key).unwrap(),
    );
    let with_cert = endpoint
        .clone()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(ca_pem.clone())
                .identity(identity),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(with_cert);
    assert_eq!(
        check(&mut health, "").await.unwrap(),
        ServingStatus::Serving
    );

    let without_cert = endpoint
        .tls_config(ClientTlsConfig::new().ca_certificate(ca_pem))
        .unwrap()
        .connect()
        .await;
    let refused = match without_cert {
        Err(_) => true,
        Ok(channel) => check(&mut HealthClient::new(channel), "").await.is_err(),
    };
    assert!(refused, "a client without a certificate was served");
}

#[tokio::test]
async fn unreadable_tls_files_fail_at_bind_with_the_path() {
    let mut args = ServeArgs::ephemeral();
    args.tls = TlsArgs {
        tls_cert: Some("/nonexistent/tls.crt".into()),
        tls_key: Some("/nonexistent/tls.key".into()),
        tls_client_ca: None,
    };
    let err = GrpcServer::new(args).bind().await.unwrap_err();
    assert!(err.to_string().contains("/nonexistent/tls.crt"), "{err}");
}

async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn a_spawned_server_on_port_0_reports_its_ports_and_closes_them_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("addrs");
    let running = GrpcServer::new(ServeArgs {
        bound_addrs_file: Some(file.clone()),
        ..ServeArgs::ephemeral()
    })
    .spawn()
    .await
    .unwrap();
    let (grpc, admin) = (running.grpc_addr(), running.admin_addr());
    assert_ne!(grpc.port(), 0);
    assert_ne!(admin.port(), 0);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("grpc={grpc}\nadmin={admin}\n")
    );
    assert_eq!(
        ksim_grpc::BoundAddrs::read(&file),
        Some(ksim_grpc::BoundAddrs { grpc, admin })
    );
    assert_eq!(ksim_grpc::BoundAddrs::read(&dir.path().join("none")), None);
    let mut health = HealthClient::new(channel(grpc).await);
    assert_eq!(
        check(&mut health, "").await.unwrap(),
        ServingStatus::Serving
    );

    running.shutdown().await.unwrap();
    assert!(
        TcpStream::connect(grpc).await.is_err(),
        "gRPC port still open"
    );
    assert!(
        TcpStream::connect(admin).await.is_err(),
        "admin port still open"
    );
}
