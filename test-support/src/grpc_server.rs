//! gRPC servers for the gRPC probe tests, all on 127.0.0.1 with an ephemeral port: tonic-health
//! with set statuses, a scripted `Health` implementation, a tonic server without the health
//! service, and raw TCP servers that never speak HTTP/2.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::codegen::tokio_stream;
use tonic::metadata::MetadataMap;
use tonic::service::Routes;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// A running test server; dropping it stops it.
pub struct TestServer {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl TestServer {
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        // A hung handler would hold a graceful shutdown open.
        self.task.abort();
    }
}

async fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0")
}

async fn serve(routes: Routes) -> TestServer {
    serve_on(bind().await, routes)
}

fn serve_on(listener: TcpListener, routes: Routes) -> TestServer {
    let addr = listener.local_addr().expect("local addr");
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(async move {
        let _ = Server::builder()
            .add_routes(routes)
            .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                let _ = rx.await;
            })
            .await;
    });
    TestServer { addr, shutdown: Some(tx), task }
}

/// tonic-health with the overall service `""` SERVING and the given named statuses.
pub async fn health(statuses: &[(&str, ServingStatus)]) -> TestServer {
    let (reporter, service) = tonic_health::server::health_reporter();
    for (name, status) in statuses {
        reporter.set_service_status(*name, *status).await;
    }
    serve(Routes::new(service)).await
}

/// tonic-health (overall service SERVING) on a given port of 127.0.0.1.
pub async fn health_on(port: u16) -> TestServer {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind the given port");
    let (_reporter, service) = tonic_health::server::health_reporter();
    serve_on(listener, Routes::new(service))
}

/// A tonic server with no services at all: every call is Unimplemented.
pub async fn without_health() -> TestServer {
    serve(Routes::default()).await
}

/// What the scripted `Health/Check` does.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Answer with this raw `ServingStatus` number.
    Status(i32),
    /// Fail with this code and message.
    Error(Code, String),
    /// Never answer.
    Hang,
}

/// A `Health` implementation that answers as scripted and records each request's metadata.
#[derive(Clone)]
pub(crate) struct ScriptedHealth {
    reply: Reply,
    seen: Arc<Mutex<Vec<MetadataMap>>>,
}

#[tonic::codegen::async_trait]
impl Health for ScriptedHealth {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        self.seen.lock().expect("metadata lock").push(request.metadata().clone());
        match &self.reply {
            Reply::Status(status) => Ok(Response::new(HealthCheckResponse { status: *status })),
            Reply::Error(code, message) => Err(Status::new(*code, message.clone())),
            Reply::Hang => std::future::pending().await,
        }
    }

    type WatchStream = tokio_stream::Pending<Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Ok(Response::new(tokio_stream::pending()))
    }
}

/// A scripted health server and the metadata of the requests it received.
pub async fn scripted(reply: Reply) -> (TestServer, Arc<Mutex<Vec<MetadataMap>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = ScriptedHealth { reply, seen: seen.clone() };
    (serve(Routes::new(HealthServer::new(service))).await, seen)
}

/// Accepts connections and holds them open without ever writing a byte.
pub async fn silent_tcp() -> TestServer {
    raw_tcp(|stream| async move {
        let _held: TcpStream = stream;
        std::future::pending::<()>().await;
    })
    .await
}

/// Answers every connection with an HTTP/1.1 error and closes it, like a plain web server.
pub async fn http1_tcp() -> TestServer {
    raw_tcp(|mut stream| async move {
        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await;
        let _ = stream.shutdown().await;
    })
    .await
}

async fn raw_tcp<F, Fut>(handle: F) -> TestServer
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = bind().await;
    let addr = listener.local_addr().expect("local addr");
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            connections.spawn(handle(stream));
        }
    });
    TestServer { addr, shutdown: None, task }
}

/// A port on 127.0.0.1 that nothing listens on (bound, then released).
pub async fn closed_port() -> u16 {
    let listener = bind().await;
    listener.local_addr().expect("local addr").port()
}
