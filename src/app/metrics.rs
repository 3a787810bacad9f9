//! The HTTP endpoint that serves the metrics registry (`crate::metrics`): `GET /metrics`
//! (OpenMetrics text) and `GET /health` (readiness), on a background thread.

use std::net::SocketAddr;

use crate::metrics::{global, Metrics, OFF};

/// Errors of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The listening socket could not be opened (fatal: a usage or deployment error).
    #[error("cannot serve metrics on {address}: {message}")]
    Bind {
        /// The configured address.
        address: String,
        /// The cause.
        message: String,
    },
}

/// Starts the endpoint on `address` (`"off"`: nothing) in a background thread; returns the bound
/// address, which differs from `address` for port 0. Logs `metrics listening`.
pub fn serve(address: &str) -> Result<Option<SocketAddr>, MetricsError> {
    if address.eq_ignore_ascii_case(OFF) {
        return Ok(None);
    }
    let bind = |message: String| MetricsError::Bind {
        address: address.to_string(),
        message,
    };
    let server = tiny_http::Server::http(address).map_err(|e| bind(e.to_string()))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| bind("not an IP address".into()))?;
    let m = global();
    m.enable();
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                respond(m, req);
            }
        })
        .map_err(|e| bind(e.to_string()))?;
    tracing::info!(address = %bound, "metrics listening");
    Ok(Some(bound))
}

fn respond(m: &Metrics, req: tiny_http::Request) {
    let header = |v: &str| tiny_http::Header::from_bytes(&b"Content-Type"[..], v.as_bytes()).ok();
    let path = req.url().split('?').next().unwrap_or_default();
    let (status, body, ctype) = match (req.method(), path) {
        (tiny_http::Method::Get, "/metrics") => (
            200,
            m.render(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        (tiny_http::Method::Get, "/health") => match m.health() {
            None => (200, "ready\n".to_string(), "text/plain; charset=utf-8"),
            Some(reason) => (
                503,
                format!("not ready: {reason}\n"),
                "text/plain; charset=utf-8",
            ),
        },
        _ => (404, "not found\n".to_string(), "text/plain; charset=utf-8"),
    };
    let mut resp = tiny_http::Response::from_string(body).with_status_code(status);
    if let Some(h) = header(ctype) {
        resp = resp.with_header(h);
    }
    if let Err(e) = req.respond(resp) {
        tracing::debug!(error = %e, "metrics response not sent");
    }
}
