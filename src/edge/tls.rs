//! TLS termination (rustls with the ring provider): TLS 1.2 and 1.3 only, ALPN `h2`
//! and `http/1.1`. The server config is part of the config snapshot, so a reload that
//! brings new certificate files applies them to every new connection.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;

use crate::config::{Scope, TlsConfig};

/// Read the certificate chain and key named in `cfg` (relative to `dir`) and build
/// the server config; problems are recorded under `at` (`server.tls`).
pub fn compile(cfg: &TlsConfig, dir: &Path, at: &mut Scope) -> Option<Arc<ServerConfig>> {
    server_config(cfg, dir)
        .map_err(|(key, e)| at.push(key, e))
        .ok()
}

/// The server config, or the key at fault and what is wrong with it.
fn server_config(cfg: &TlsConfig, dir: &Path) -> Result<Arc<ServerConfig>, (&'static str, String)> {
    let cert_path = dir.join(&cfg.cert_file);
    let key_path = dir.join(&cfg.key_file);
    let open = |path: &Path, which: &'static str| {
        File::open(path)
            .map(BufReader::new)
            .map_err(|e| (which, format!("cannot read {}: {e}", path.display())))
    };

    let certs = rustls_pemfile::certs(&mut open(&cert_path, "cert_file")?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            (
                "cert_file",
                format!("{}: invalid PEM: {e}", cert_path.display()),
            )
        })?;
    if certs.is_empty() {
        return Err((
            "cert_file",
            format!("{} holds no PEM certificate", cert_path.display()),
        ));
    }
    let key = rustls_pemfile::private_key(&mut open(&key_path, "key_file")?)
        .map_err(|e| {
            (
                "key_file",
                format!("{}: invalid PEM: {e}", key_path.display()),
            )
        })?
        .ok_or_else(|| {
            (
                "key_file",
                format!("{} holds no PEM private key", key_path.display()),
            )
        })?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| ("listen", format!("TLS setup failed: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ("key_file", format!("certificate and key do not fit: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(cert: &str, key: &str) -> TlsConfig {
        TlsConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            cert_file: cert.into(),
            key_file: key.into(),
            handshake_timeout_ms: 1000,
        }
    }

    fn write_pair(dir: &Path, name: &str) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        std::fs::write(dir.join(format!("{name}.crt")), ck.cert.pem()).unwrap();
        std::fs::write(
            dir.join(format!("{name}.key")),
            ck.signing_key.serialize_pem(),
        )
        .unwrap();
    }

    #[test]
    fn loads_a_pair_with_both_alpn_protocols() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path(), "a");
        let config = server_config(&cfg("a.crt", "a.key"), dir.path()).unwrap();
        assert_eq!(
            config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    #[test]
    fn problems_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path(), "a");
        write_pair(dir.path(), "b");
        std::fs::write(dir.path().join("empty.pem"), "").unwrap();
        let err = |c: &str, k: &str| server_config(&cfg(c, k), dir.path()).unwrap_err();
        assert_eq!(err("missing.crt", "a.key").0, "cert_file");
        assert!(err("empty.pem", "a.key").1.contains("no PEM certificate"));
        assert!(err("a.crt", "empty.pem").1.contains("no PEM private key"));
        let (key, msg) = err("a.crt", "b.key");
        assert_eq!(key, "key_file");
        assert!(msg.contains("do not fit"), "{msg}");
    }
}
