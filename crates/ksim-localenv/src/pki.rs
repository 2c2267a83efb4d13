//! A throwaway certificate authority for one control plane: serving certificates for each
//! component, client certificates for each identity, and the service-account signing key.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::Error;

/// A PEM certificate and its private key on disk.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The CA, able to sign more certificates into its directory.
pub struct CertificateAuthority {
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    cert_file: PathBuf,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cert_file", &self.cert_file)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Creates a CA named `common_name` and writes `ca.crt` / `ca.key` into `dir`.
    pub fn create(dir: &Path, common_name: &str) -> Result<Self, Error> {
        Self::create_as(dir, "ca", common_name)
    }

    /// Creates a CA named `common_name` and writes `<file_stem>.crt` / `<file_stem>.key` into
    /// `dir`: for a second CA beside the first, such as the aggregation layer's front proxy's.
    pub fn create_as(dir: &Path, file_stem: &str, common_name: &str) -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = name(common_name, None);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        let cert_file = dir.join(format!("{file_stem}.crt"));
        write(&cert_file, cert.pem())?;
        write(&dir.join(format!("{file_stem}.key")), key.serialize_pem())?;
        Ok(Self {
            dir: dir.to_owned(),
            issuer: Issuer::new(params, key),
            cert_file,
        })
    }

    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }

    /// A server certificate valid for the given DNS names and IPs.
    pub fn server_cert(
        &self,
        file_stem: &str,
        dns: &[&str],
        ips: &[IpAddr],
    ) -> Result<CertFiles, Error> {
        let mut params = CertificateParams::new(
            dns.iter()
                .map(|name| (*name).to_owned())
                .collect::<Vec<_>>(),
        )?;
        params
            .subject_alt_names
            .extend(ips.iter().copied().map(SanType::IpAddress));
        params.distinguished_name = name(dns.first().copied().unwrap_or(file_stem), None);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(file_stem, params)
    }

    /// A client certificate: Kubernetes reads the user from CN and groups from O.
    pub fn client_cert(
        &self,
        file_stem: &str,
        user: &str,
        group: Option<&str>,
    ) -> Result<CertFiles, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = name(user, group);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(file_stem, params)
    }

    fn sign(&self, file_stem: &str, mut params: CertificateParams) -> Result<CertFiles, Error> {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let files = CertFiles {
            cert: self.dir.join(format!("{file_stem}.crt")),
            key: self.dir.join(format!("{file_stem}.key")),
        };
        write(&files.cert, cert.pem())?;
        write(&files.key, key.serialize_pem())?;
        Ok(files)
    }
}

/// The key pair kube-apiserver signs service-account tokens with (private half) and verifies
/// them with (public half).
#[derive(Debug, Clone)]
pub struct ServiceAccountKey {
    pub private: PathBuf,
    pub public: PathBuf,
}

impl ServiceAccountKey {
    /// Writes a fresh key pair as `service-account.key` / `service-account.pub` into `dir`.
    pub fn create(dir: &Path) -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let files = Self {
            private: dir.join("service-account.key"),
            public: dir.join("service-account.pub"),
        };
        write(&files.private, key.serialize_pem())?;
        write(&files.public, key.public_key_pem())?;
        Ok(files)
    }
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    if let Some(organization) = organization {
        name.push(DnType::OrganizationName, organization);
    }
    name
}

fn write(path: &Path, contents: String) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(Error::io("cannot write", path))
}
