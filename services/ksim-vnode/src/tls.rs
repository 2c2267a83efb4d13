//! The TLS of the pool's HTTPS servers (the metrics API, the nodes' kubelet endpoints): one
//! crypto provider, client CA bundles read the same way, and for the metrics API a throwaway CA
//! and serving certificate made at start-up (the APIService's `caBundle` is that CA), with
//! client certificates checked against the front proxy's CA after the handshake, so a caller
//! without a good one gets a 401 answer rather than a broken connection.

use std::{net::IpAddr, sync::Arc};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::{
    DigitallySignedStruct, DistinguishedName as TlsName, ServerConfig, SignatureScheme,
    client::danger::HandshakeSignatureValid,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime},
    server::{
        WebPkiClientVerifier,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating the serving certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("the front proxy's client CA: {0}")]
    ClientCa(String),
}

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM bundle as trust roots; a bundle with none is refused.
pub fn client_roots(pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|error| error.to_string())?;
        roots.add(cert).map_err(|error| error.to_string())?;
    }
    if roots.is_empty() {
        return Err("no certificate in the bundle".to_owned());
    }
    Ok(roots)
}

/// A serving certificate for `dns` and `ip`, and the PEM of the CA that signed it.
pub struct Serving {
    pub ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving").finish_non_exhaustive()
    }
}

pub fn serving_certificate(dns: &str, ip: IpAddr) -> Result<Serving, TlsError> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    let mut ca_name = DistinguishedName::new();
    ca_name.push(DnType::CommonName, "ksim-vnode-metrics-ca");
    ca_params.distinguished_name = ca_name;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![dns.to_owned(), "localhost".to_owned()])?;
    params.subject_alt_names.push(SanType::IpAddress(ip));
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, dns);
    params.distinguished_name = name;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Serving {
        ca_pem: ca_cert.pem(),
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    })
}

/// The server side of the handshake: HTTP/1.1, the serving certificate, client certificates
/// asked for (hinting the front proxy's CA) but judged by [`ClientCa::verify`] afterwards.
pub fn server_config(serving: Serving, client_ca: &ClientCa) -> Result<ServerConfig, TlsError> {
    let verifier = Arc::new(Deferred {
        inner: client_ca.verifier.clone(),
    });
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(serving.chain, serving.key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The front proxy's CA: the only issuer whose client certificates may assert a user.
#[derive(Debug, Clone)]
pub struct ClientCa {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl ClientCa {
    /// From the PEM bundle of `requestheader-client-ca-file`.
    pub fn from_pem(pem: &str) -> Result<Self, TlsError> {
        let roots = client_roots(pem.as_bytes()).map_err(TlsError::ClientCa)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|error| TlsError::ClientCa(error.to_string()))?;
        Ok(Self { verifier })
    }

    /// Whether the chain a client presented is signed by this CA and valid now.
    pub fn verify(&self, chain: &[CertificateDer<'_>]) -> Result<(), String> {
        let (end_entity, intermediates) = chain
            .split_first()
            .ok_or_else(|| "no client certificate".to_owned())?;
        self.verifier
            .verify_client_cert(end_entity, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|error| format!("client certificate not trusted: {error}"))
    }
}

/// Asks for a client certificate and checks the client holds its key (the handshake
/// signature), but leaves the chain to [`ClientCa::verify`], so that a missing or untrusted
/// certificate is answered with a 401 Status as an aggregated apiserver would.
#[derive(Debug)]
struct Deferred {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for Deferred {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[TlsName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The subject common name of a DER certificate.
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?;
    name.as_str().ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::net::Ipv4Addr;

    use super::*;

    /// A CA and a client certificate it signs for `cn`, as DER.
    fn client(cn: &str) -> (String, CertificateDer<'static>) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &issuer).unwrap();
        (ca_cert.pem(), cert.der().clone())
    }

    #[test]
    fn a_client_certificate_is_trusted_only_from_its_ca() {
        let (ca_pem, cert) = client("front-proxy-client");
        let (other_ca_pem, _) = client("x");
        assert_eq!(
            ClientCa::from_pem(&ca_pem)
                .unwrap()
                .verify(std::slice::from_ref(&cert)),
            Ok(())
        );
        let other = ClientCa::from_pem(&other_ca_pem).unwrap();
        assert!(other.verify(std::slice::from_ref(&cert)).is_err());
        assert!(other.verify(&[]).is_err());
        assert_eq!(common_name(&cert).as_deref(), Some("front-proxy-client"));
    }

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        assert!(ClientCa::from_pem("").is_err());
        assert!(ClientCa::from_pem("-----BEGIN CERTIFICATE-----\nnope\n").is_err());
    }

    #[test]
    fn the_serving_configuration_builds() {
        let (ca_pem, _) = client("front-proxy-client");
        let serving =
            serving_certificate("svc.ns.svc", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))).unwrap();
        assert!(serving.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let config = server_config(serving, &ClientCa::from_pem(&ca_pem).unwrap()).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
