//! Server TLS and mutual TLS from PEM files.

use std::path::Path;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::{Error, TlsArgs};

/// Reads the files named by `args`. `None` means plaintext (h2c); a client CA means clients
/// must present a certificate it signed.
pub fn server_tls_config(args: &TlsArgs) -> Result<Option<ServerTlsConfig>, Error> {
    let (cert, key) = match (&args.tls_cert, &args.tls_key) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(Error::IncompleteTls {
                given: "--tls-cert",
            });
        }
        (None, Some(_)) => return Err(Error::IncompleteTls { given: "--tls-key" }),
        (Some(cert), Some(key)) => (cert, key),
    };
    let identity = Identity::from_pem(
        read("the TLS certificate", cert)?,
        read("the TLS private key", key)?,
    );
    let mut config = ServerTlsConfig::new().identity(identity);
    if let Some(ca) = &args.tls_client_ca {
        config = config.client_ca_root(Certificate::from_pem(read("the client CA", ca)?));
    }
    Ok(Some(config))
}

/// PEM files of a few KiB; a bundle of many CAs stays far under this.
const MAX_PEM_BYTES: usize = 1 << 20;

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, Error> {
    Ok(crate::files::read_bounded(path, MAX_PEM_BYTES, what)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn no_files_means_plaintext() {
        assert!(server_tls_config(&TlsArgs::default()).unwrap().is_none());
    }

    #[test]
    fn a_certificate_without_a_key_is_refused() {
        let args = TlsArgs {
            tls_cert: Some(PathBuf::from("cert.pem")),
            ..TlsArgs::default()
        };
        let err = server_tls_config(&args).unwrap_err();
        assert!(err.to_string().contains("--tls-key"), "{err}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let args = TlsArgs {
            tls_cert: Some(PathBuf::from("/nonexistent/cert.pem")),
            tls_key: Some(PathBuf::from("/nonexistent/key.pem")),
            tls_client_ca: None,
        };
        let err = server_tls_config(&args).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/cert.pem"), "{err}");
    }
}
