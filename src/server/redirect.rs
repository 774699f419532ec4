//! The optional plain-HTTP listener of a TLS server (`[tls] redirect_listen`): it answers
//! every request with `308 Permanent Redirect` to the same path and query under `public_url`
//! and serves nothing else, so no API call or credential is ever answered in plain text.
//!
//! The target is built from `public_url`, never from the request's `Host` header, so a
//! client cannot make the server redirect elsewhere.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::server::ServerError;

/// Binds `at` and serves redirects to `public_url` until the returned task is aborted.
pub async fn bind(
    at: SocketAddr,
    public_url: String,
    builder: auto::Builder<TokioExecutor>,
) -> Result<(SocketAddr, JoinHandle<()>), ServerError> {
    let listener = TcpListener::bind(at)
        .await
        .map_err(|source| ServerError::Io {
            context: format!("cannot listen on {at} (tls.redirect_listen)"),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Io {
        context: "cannot read the redirect listener's address".into(),
        source,
    })?;
    let task = tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    log::warn!("redirect listener: accept failed: {err}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let public_url = public_url.clone();
            let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let target = target(&public_url, req.uri());
                async move { Ok::<_, Infallible>(redirect(&target)) }
            });
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            tokio::spawn(async move {
                let _ = connection.await;
            });
        }
    });
    Ok((addr, task))
}

/// `public_url` followed by the request's path and query.
fn target(public_url: &str, uri: &http::Uri) -> String {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    format!("{}{path}", public_url.trim_end_matches('/'))
}

fn redirect(target: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"")));
    *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
    if let Ok(location) = http::HeaderValue::from_str(target) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_keep_path_and_query_under_the_public_url() {
        let uri: http::Uri = "/api/v1/data/x?limit=5".parse().unwrap();
        assert_eq!(
            target("https://intake.example.com/", &uri),
            "https://intake.example.com/api/v1/data/x?limit=5"
        );
        let uri: http::Uri = "http://evil.example/".parse().unwrap();
        assert_eq!(target("https://i.example", &uri), "https://i.example/");
    }
}
