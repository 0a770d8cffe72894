//! HTTPS for the API (node.yaml `api_tls:`): rustls with the ring provider, HTTP/1.1 over each
//! accepted TLS connection, the same router as plain HTTP.

use anyhow::Context;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use snic_core::config::TlsSection;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::TlsAcceptor;

/// A TLS handshake that has not finished in this long is dropped (a client that connects and
/// stalls holds nothing for longer).
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The acceptor for `t`'s certificate and key; errors name the file and what is wrong.
pub fn acceptor(t: &TlsSection) -> anyhow::Result<TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&t.cert_file)
        .with_context(|| format!("api_tls.cert_file: reading {}", t.cert_file.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("api_tls.cert_file: {} is not PEM certificates", t.cert_file.display()))?;
    if certs.is_empty() {
        anyhow::bail!("api_tls.cert_file: {} holds no certificate", t.cert_file.display());
    }
    let key = PrivateKeyDer::from_pem_file(&t.key_file)
        .with_context(|| format!("api_tls.key_file: {} holds no PEM private key", t.key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("api_tls: the key does not fit the certificate")?;
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}

/// Serves `app` over TLS on `listener` until `shutdown` completes; connections in progress
/// finish on their own tasks.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: TlsAcceptor,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an API connection failed");
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let (tls, app) = (tls.clone(), app.clone());
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE, tls.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake refused"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let service = TowerToHyperService::new(app);
            if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!(%peer, error = %e, "API connection ended with an error");
            }
        });
    }
}
