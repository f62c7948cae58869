//! Test certificates: a CA of the test's own and a leaf for `localhost` and
//! 127.0.0.1 signed by it.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

pub struct Certs {
    /// The CA, PEM (for a provider's `ca_file`) and DER (for a client's roots).
    pub ca_pem: String,
    pub ca_der: CertificateDer<'static>,
    /// The leaf, PEM (for `server.tls.cert_file`).
    pub leaf_pem: String,
    /// The leaf's key, PEM (for `server.tls.key_file`).
    pub key_pem: String,
    leaf_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Certs {
    pub fn new() -> Self {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "mediagate test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA");
        let leaf_key = KeyPair::generate().expect("leaf key");
        let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("leaf params")
            .signed_by(&leaf_key, &ca)
            .expect("leaf");
        Self {
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            leaf_pem: leaf.pem(),
            key_pem: leaf_key.serialize_pem(),
            leaf_der: leaf.der().clone(),
            key_der: leaf_key.serialize_der(),
        }
    }

    /// A server config presenting the leaf, offering `alpn`.
    pub fn server_config(&self, alpn: &[&[u8]]) -> rustls::ServerConfig {
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![self.leaf_der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone())),
        )
        .expect("server certificate");
        tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        tls
    }
}
