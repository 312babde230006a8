//! Self-managed webhook certificates: a CA and a serving certificate for the webhook's host names,
//! stored in a Secret with OpenKruise's keys, renewed before they expire or when the host changes.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

pub const KEY_CA_KEY: &str = "ca-key.pem";
pub const KEY_CA_CERT: &str = "ca-cert.pem";
pub const KEY_KEY: &str = "key.pem";
pub const KEY_CERT: &str = "cert.pem";
pub const KEY_TLS_KEY: &str = "tls.key";
pub const KEY_TLS_CERT: &str = "tls.crt";
/// The CA of an externally issued serving certificate (cert-manager's key).
pub const KEY_CA_CRT: &str = "ca.crt";

/// Validity of generated certificates (as upstream: ten years).
const VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The PEM material the webhook serves with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertBundle {
    pub ca_key: String,
    pub ca_cert: String,
    pub key: String,
    pub cert: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
}

/// A new CA and a serving certificate for `host` (a DNS name or an IP) plus `localhost`.
pub fn generate(host: &str) -> Result<CertBundle, CertError> {
    let now = time::OffsetDateTime::now_utc();
    let not_after = now + VALIDITY;

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "webhook-cert-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = now - Duration::from_secs(300);
    ca_params.not_after = not_after;
    let ca_cert = ca_params.self_signed(&ca_key)?;

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
    params.distinguished_name.push(DnType::CommonName, host);
    match host.parse::<IpAddr>() {
        Ok(ip) => params.subject_alt_names.push(SanType::IpAddress(ip)),
        Err(_) => params
            .subject_alt_names
            .push(SanType::DnsName(host.try_into()?)),
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now - Duration::from_secs(300);
    params.not_after = not_after;
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(CertBundle {
        ca_key: ca_key.serialize_pem(),
        ca_cert: ca_cert.pem(),
        key: key.serialize_pem(),
        cert: cert.pem(),
    })
}

impl CertBundle {
    /// Reads the bundle from Secret data; `None` when a key is missing or not text.
    pub fn from_secret_data(data: &BTreeMap<String, ByteString>) -> Option<Self> {
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        Some(Self {
            ca_key: text(KEY_CA_KEY)?,
            ca_cert: text(KEY_CA_CERT)?,
            key: text(KEY_KEY)?,
            cert: text(KEY_CERT)?,
        })
    }

    /// Reads an externally managed bundle (cert-manager's Secret: `tls.crt`, `tls.key`, `ca.crt`);
    /// `ca_key` stays empty: kruise-rs never signs with it. `None` when a key is missing or not text.
    pub fn from_external_secret_data(data: &BTreeMap<String, ByteString>) -> Option<Self> {
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .filter(|text| !text.trim().is_empty())
        };
        Some(Self {
            ca_key: String::new(),
            ca_cert: text(KEY_CA_CRT)?,
            key: text(KEY_TLS_KEY)?,
            cert: text(KEY_TLS_CERT)?,
        })
    }

    /// Secret data with OpenKruise's keys (the serving pair twice, as `key.pem`/`cert.pem` and
    /// `tls.key`/`tls.crt`).
    pub fn to_secret_data(&self) -> BTreeMap<String, ByteString> {
        [
            (KEY_CA_KEY, &self.ca_key),
            (KEY_CA_CERT, &self.ca_cert),
            (KEY_KEY, &self.key),
            (KEY_CERT, &self.cert),
            (KEY_TLS_KEY, &self.key),
            (KEY_TLS_CERT, &self.cert),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect()
    }

    /// Why the bundle cannot be used for `host` until `now + renew_before`, or `None` if it can.
    pub fn problem(&self, host: &str, renew_before: Duration) -> Option<String> {
        let pem = match x509_parser::pem::parse_x509_pem(self.cert.as_bytes()) {
            Ok((_, pem)) => pem,
            Err(error) => return Some(format!("serving certificate is not PEM: {error}")),
        };
        let cert = match pem.parse_x509() {
            Ok(cert) => cert,
            Err(error) => return Some(format!("serving certificate does not parse: {error}")),
        };
        if x509_parser::pem::parse_x509_pem(self.ca_cert.as_bytes()).is_err() {
            return Some("CA certificate is not PEM".into());
        }
        let deadline = time::OffsetDateTime::now_utc() + renew_before;
        if cert.validity().not_after.to_datetime() < deadline {
            return Some(format!(
                "serving certificate expires at {}",
                cert.validity().not_after
            ));
        }
        let covers = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .is_some_and(|san| {
                san.value.general_names.iter().any(|name| match name {
                    x509_parser::extensions::GeneralName::DNSName(dns) => *dns == host,
                    x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                        host.parse::<IpAddr>().is_ok_and(|ip| match ip {
                            IpAddr::V4(v4) => *bytes == v4.octets(),
                            IpAddr::V6(v6) => *bytes == v6.octets(),
                        })
                    }
                    _ => false,
                })
            });
        if !covers {
            return Some(format!("serving certificate does not cover {host}"));
        }
        None
    }
}

/// Parses a renewal window such as `180d`, `6m` (30-day months), `1y`, or a number of seconds.
pub fn parse_renew_before(text: &str) -> Result<Duration, String> {
    let day = 24 * 3600;
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}"))?;
    let seconds = match unit {
        "" | "s" => n,
        "d" => n * day,
        "m" => n * 30 * day,
        "y" => n * 365 * day,
        other => {
            return Err(format!(
                "invalid duration unit {other:?} in {text:?} (use d, m or y)"
            ));
        }
    };
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_bundle_covers_its_host() -> Result<(), CertError> {
        let bundle = generate("kruise-webhook-service.kruise-system.svc")?;
        assert_eq!(
            bundle.problem(
                "kruise-webhook-service.kruise-system.svc",
                Duration::from_secs(3600)
            ),
            None
        );
        assert!(
            bundle
                .problem("other.svc", Duration::ZERO)
                .is_some_and(|p| p.contains("does not cover"))
        );
        let six_months = parse_renew_before("6m").expect("duration");
        assert_eq!(
            bundle.problem("kruise-webhook-service.kruise-system.svc", six_months),
            None
        );
        let twenty_years = parse_renew_before("20y").expect("duration");
        assert!(
            bundle
                .problem("kruise-webhook-service.kruise-system.svc", twenty_years)
                .is_some_and(|p| p.contains("expires"))
        );
        Ok(())
    }

    #[test]
    fn ip_hosts_get_ip_sans() -> Result<(), CertError> {
        let bundle = generate("127.0.0.1")?;
        assert_eq!(bundle.problem("127.0.0.1", Duration::ZERO), None);
        Ok(())
    }

    #[test]
    fn secret_data_round_trip() -> Result<(), CertError> {
        let bundle = generate("h")?;
        let data = bundle.to_secret_data();
        assert_eq!(data.len(), 6);
        assert_eq!(CertBundle::from_secret_data(&data), Some(bundle));
        Ok(())
    }

    #[test]
    fn renew_before_units() {
        assert_eq!(parse_renew_before("2d"), Ok(Duration::from_secs(2 * 86400)));
        assert_eq!(
            parse_renew_before("1y"),
            Ok(Duration::from_secs(365 * 86400))
        );
        assert!(parse_renew_before("3w").is_err());
    }
}
