//! Certificates for the local control plane, made in process with rcgen (no openssl CLI).
//!
//! One CA signs the apiserver's serving certificate; later, webhook serving certificates can be issued by
//! the same CA so that the apiserver trusts them through the `caBundle`.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A PEM certificate and its PEM private key.
#[derive(Clone, Debug)]
pub struct CertAndKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The cluster CA; it issues serving certificates.
pub struct ClusterCa {
    pub pem: String,
    params: CertificateParams,
    key: KeyPair,
}

impl ClusterCa {
    pub fn generate(common_name: &str) -> anyhow::Result<Self> {
        let key = KeyPair::generate().context("generating the CA key")?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).context("self-signing the CA")?;
        Ok(Self {
            pem: cert.pem(),
            params,
            key,
        })
    }

    /// A serving certificate for `dns_names` and `ips`.
    pub fn issue_serving(
        &self,
        common_name: &str,
        dns_names: &[&str],
        ips: &[IpAddr],
    ) -> anyhow::Result<CertAndKey> {
        let key = KeyPair::generate().context("generating a serving key")?;
        let mut params =
            CertificateParams::new(dns_names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .context("serving certificate names")?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params
            .subject_alt_names
            .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params
            .signed_by(&key, &issuer)
            .context("signing a serving certificate")?;
        Ok(CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The apiserver's serving certificate: loopback plus the in-cluster names of the `kubernetes` Service.
    pub fn issue_apiserver(&self) -> anyhow::Result<CertAndKey> {
        self.issue_serving(
            "kube-apiserver",
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ],
            &[
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ],
        )
    }
}

/// A fresh service-account signing key (ECDSA P-256): the private key in PKCS#8 PEM (for signing) and the
/// public key in PKIX PEM (for verifying; kube-apiserver does not derive it from a PKCS#8 private key).
pub fn signing_key_pem() -> anyhow::Result<CertAndKey> {
    let key = KeyPair::generate().context("generating the service-account key")?;
    Ok(CertAndKey {
        cert_pem: key.public_key_pem(),
        key_pem: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_issues_pem_certificates() -> anyhow::Result<()> {
        let ca = ClusterCa::generate("test-ca")?;
        assert!(ca.pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let serving = ca.issue_apiserver()?;
        assert!(serving.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(serving.key_pem.contains("PRIVATE KEY"));
        assert_ne!(serving.cert_pem, ca.pem);
        Ok(())
    }
}
