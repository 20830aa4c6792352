//! A health endpoint on 127.0.0.1 whose answer a test flips: `/healthz` answers 200 while the
//! flag is set, 503 otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

/// Starts the server; returns its port and the flag (initially healthy).
pub async fn toggled_health_server() -> (u16, Arc<AtomicBool>) {
    let healthy = Arc::new(AtomicBool::new(true));
    let flag = healthy.clone();
    let app = Router::new().route(
        "/healthz",
        get(move || {
            let flag = flag.clone();
            async move {
                if flag.load(Ordering::SeqCst) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, healthy)
}
