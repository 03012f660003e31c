//! TLS for the ports that clients outside tickdb reach (HTTP, PostgreSQL
//! wire), with rustls: a certificate chain and its key, PEM, from
//! `--tls-cert` and `--tls-key`. With them a port speaks only TLS: a
//! plaintext client gets an answer it can read saying so (HTTP 400 in
//! plain HTTP, PostgreSQL FATAL 28000), never a hang or garbage.

use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use tokio_rustls::server::TlsStream;
pub use tokio_rustls::TlsAcceptor;

/// The first byte of a TLS record carrying a handshake: how a port tells
/// a TLS client from a plaintext one without consuming anything.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// A server config from PEM files; the error names the file and what is
/// wrong with it.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--tls-cert {}: no CERTIFICATE in it (PEM expected)",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "--tls-key {}: {e} (a PEM private key: PKCS#8, PKCS#1 or SEC1)",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("--tls-cert and --tls-key do not make a server identity: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Whether the next byte on `sock` starts a TLS handshake (None: closed
/// before sending anything).
pub async fn starts_tls(sock: &tokio::net::TcpStream) -> std::io::Result<Option<bool>> {
    let mut b = [0u8; 1];
    let n = sock.peek(&mut b).await?;
    Ok((n == 1).then_some(b[0] == TLS_HANDSHAKE_BYTE))
}
