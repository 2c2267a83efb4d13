//! Every gRPC server is a service: a crate that is not one (the CLI, a library) serves no gRPC
//! API. A crate serves one when it names a generated server (`..._server::SomeServer`), the
//! services' shared runtime (`GrpcServer`) or tonic's own (`transport::Server`). `#[cfg(test)]`
//! items are left out, as in the other checks.

use std::path::Path;

use crate::modules::Crate;

/// What `path` names that serves gRPC, if anything.
fn serving(path: &[String]) -> Option<&'static str> {
    let generated = path.windows(2).any(|pair| {
        pair[0].ends_with("_server") && pair[1].ends_with("Server") && pair[1] != "Server"
    });
    if generated {
        return Some("a generated gRPC server");
    }
    if path.iter().any(|segment| segment == "GrpcServer") {
        return Some("the services' gRPC server (ksim_grpc::GrpcServer)");
    }
    let tonic_server = path
        .windows(2)
        .any(|pair| pair[0] == "transport" && pair[1] == "Server");
    tonic_server.then_some("tonic's gRPC server")
}

/// Every path in `krate` that serves gRPC, one line each: `file: path serves what`.
pub fn servers(krate: &Crate, relative_to: &Path) -> Vec<String> {
    krate.findings(
        relative_to,
        |_| true,
        |path| serving(path).map(|what| format!("serves {what}")),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn found(files: &[(&str, &str)]) -> Vec<String> {
        let dir = crate::plant(files);
        let krate = Crate::read(&dir.path().join("src/main.rs")).unwrap();
        servers(&krate, dir.path())
    }

    #[test]
    fn a_server_in_a_crate_that_is_no_service_is_found() {
        let planted = found(&[
            ("src/main.rs", "mod env; mod api; mod raw;"),
            (
                "src/env.rs",
                "use ksim_proto::ksim::env::v1::environment_server::{Environment, EnvironmentServer};",
            ),
            (
                "src/api.rs",
                "fn serve() { let _ = ksim_grpc::GrpcServer::new(args); }",
            ),
            (
                "src/raw.rs",
                "async fn serve() { tonic::transport::Server::builder(); }\n\
                 #[cfg(test)] mod tests { use x::y_server::YServer; }",
            ),
        ]);
        assert_eq!(
            planted,
            [
                "src/api.rs: `ksim_grpc::GrpcServer::new` serves the services' gRPC server (ksim_grpc::GrpcServer)",
                "src/env.rs: `ksim_proto::ksim::env::v1::environment_server::EnvironmentServer` serves a generated gRPC server",
                "src/raw.rs: `tonic::transport::Server::builder` serves tonic's gRPC server",
            ]
        );
    }

    #[test]
    fn a_client_is_no_server() {
        let planted = found(&[
            ("src/main.rs", "mod call;"),
            (
                "src/call.rs",
                "use ksim_proto::ksim::driver::v1::driver_client::DriverClient;\n\
                 use tonic::transport::{Channel, Endpoint};\n\
                 fn trait_only(_: &dyn ksim_proto::ksim::env::v1::environment_server::Environment) {}",
            ),
        ]);
        assert_eq!(planted, Vec::<String>::new());
    }
}
