//! Counts every request the agent's API clients send, as client-go counts a kubelet's:
//! `rest_client_requests_total{code, host, method}` (README.md, "Metrics").
//!
//! The status syncer's own `probelet_api_requests_total` counts its pod writes only, and it
//! lives in the engine, where an embedding host's client may be any client. The agent's two
//! clients carry this layer, so its watch and list of pods, events, `pods/exec`, token and
//! access reviews and readiness-gate writes are counted too, with the labels a kubelet's
//! `/metrics` gives them: the answer's HTTP code (`<error>` when none came, as client-go says
//! it, also for a request given up before its answer), the method in capitals, and the API
//! server's `host:port` as the kubeconfig names it.
//!
//! Each attempt of a request counts, with its own answer, as client-go counts it (its retry
//! counts every attempt, 1 to N, in this metric, and attempts 2 to N again in a retries metric
//! the agent does not export): the layer sits just inside kube's retry, which the agent's
//! client builder takes out of kube's stack and puts outside the count (`cluster::build`), so a
//! request kube sends again (a 429, 503 or 504 on the reading client; the writing client has
//! no retry) counts each answer, and one given up while the retry waits counts the answers
//! that came, not `<error>`. (`ClientBuilder::with_layer` wraps kube's whole stack: left in
//! it, the retry counted a 503 then a 200 as one 200, and a request given up after a 503 as
//! `<error>`.) A `pods/exec` upgrade goes through the stack too and counts as `101`, where
//! client-go's stream executors bypass the count.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use probelet_actors::metrics::REST_CLIENT_REQUESTS_TOTAL;

/// client-go's code for a request that got no answer: errors are not labels.
const NO_ANSWER: &str = "<error>";

/// The layer for [`kube::client::ClientBuilder::with_layer`].
#[derive(Debug, Clone)]
pub struct RequestMetricsLayer {
    host: Arc<str>,
}

impl RequestMetricsLayer {
    /// Requests to the API server at `cluster_url`, labelled with its `host:port` (Go's
    /// `URL.Host`: the port only where the URL writes one, and never the user information
    /// before an `@`, which Go keeps apart in `URL.User`: a `server:` that carries a password
    /// would otherwise show it on `/metrics`).
    pub fn new(cluster_url: &http::Uri) -> Self {
        let authority = cluster_url.authority().map_or("", |a| a.as_str());
        // Go splits the user information off at the authority's last `@`.
        let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
        RequestMetricsLayer { host: host.into() }
    }
}

impl<S> tower::Layer<S> for RequestMetricsLayer {
    type Service = CountedRequests<S>;

    fn layer(&self, inner: S) -> CountedRequests<S> {
        CountedRequests { inner, host: Arc::clone(&self.host) }
    }
}

/// The service of [`RequestMetricsLayer`].
#[derive(Debug, Clone)]
pub struct CountedRequests<S> {
    inner: S,
    host: Arc<str>,
}

impl<S, B, RB> tower::Service<Request<B>> for CountedRequests<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let mut pending =
            Pending { host: Arc::clone(&self.host), method: request.method().clone(), done: false };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            pending.count(match &answer {
                Ok(response) => response.status().as_str().to_owned(),
                Err(_) => NO_ANSWER.to_owned(),
            });
            answer
        })
    }
}

/// A request on its way; dropped before its answer (a watch given up, a caller's timeout), it
/// counts as one that got none, as client-go's canceled context does.
struct Pending {
    host: Arc<str>,
    method: Method,
    done: bool,
}

impl Pending {
    fn count(&mut self, code: String) {
        self.done = true;
        metrics::counter!(
            REST_CLIENT_REQUESTS_TOTAL,
            "code" => code,
            "host" => self.host.to_string(),
            "method" => self.method.as_str().to_owned(),
        )
        .increment(1);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            self.count(NO_ANSWER.to_owned());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use std::convert::Infallible;

    use probelet_actors::metrics::PrometheusRegistry;
    use tower::{Layer as _, ServiceExt as _};

    use super::*;

    fn layer() -> RequestMetricsLayer {
        RequestMetricsLayer::new(&"https://127.0.0.1:6443".parse().unwrap())
    }

    /// Runs `f` to its end on this thread, with `registry` as the recorder it sees.
    fn counted<F: Future>(registry: &PrometheusRegistry, f: F) -> F::Output {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        metrics::with_local_recorder(registry, || runtime.block_on(f))
    }

    fn answering(
        code: u16,
    ) -> impl tower::Service<Request<()>, Response = Response<()>, Error = Infallible, Future: Send + 'static>
    {
        tower::service_fn(move |_: Request<()>| async move {
            Ok::<_, Infallible>(Response::builder().status(code).body(()).unwrap())
        })
    }

    fn request(method: Method) -> Request<()> {
        Request::builder().method(method).uri("/api/v1/pods").body(()).unwrap()
    }

    /// Each answer is counted by its code and method, against the server's `host:port`, in
    /// client-go's labels (sorted by name as the kubelet's exposition sorts them).
    #[test]
    fn each_answer_is_counted_by_code_method_and_host() {
        let registry = PrometheusRegistry::new();
        counted(&registry, async {
            layer().layer(answering(200)).oneshot(request(Method::GET)).await.unwrap();
            layer().layer(answering(200)).oneshot(request(Method::GET)).await.unwrap();
            layer().layer(answering(409)).oneshot(request(Method::PATCH)).await.unwrap();
        });
        let text = registry.render();
        assert!(
            text.contains(
                "rest_client_requests_total{code=\"200\",host=\"127.0.0.1:6443\",method=\"GET\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "rest_client_requests_total{code=\"409\",host=\"127.0.0.1:6443\",method=\"PATCH\"} 1\n"
            ),
            "{text}"
        );
    }

    /// A request that got no answer, whether it failed or was given up while it waited, is
    /// `<error>`, once.
    #[test]
    fn a_request_with_no_answer_is_an_error_once() {
        let registry = PrometheusRegistry::new();
        counted(&registry, async {
            let failing = tower::service_fn(|_: Request<()>| async { Err::<Response<()>, _>("refused") });
            layer().layer(failing).oneshot(request(Method::GET)).await.unwrap_err();
            let silent = tower::service_fn(|_: Request<()>| {
                std::future::pending::<Result<Response<()>, Infallible>>()
            });
            let given_up = layer().layer(silent).oneshot(request(Method::GET));
            assert!(tokio::time::timeout(std::time::Duration::ZERO, given_up).await.is_err());
        });
        let text = registry.render();
        assert!(
            text.contains(
                "rest_client_requests_total{code=\"<error>\",host=\"127.0.0.1:6443\",method=\"GET\"} 2\n"
            ),
            "{text}"
        );
    }

    /// A request kube's retry sends again counts each answer, as client-go counts each attempt:
    /// a 503 and then the 200 are two counts, and a request given up while the retry waits
    /// out a 503's `Retry-After` counts that 503, not `<error>`. Counted outside kube's retry,
    /// the first was one 200 and the second one `<error>`.
    #[test]
    fn each_answer_of_a_retried_request_is_counted() {
        use std::sync::atomic::{AtomicUsize, Ordering};

        use axum::response::IntoResponse as _;
        use http::StatusCode;

        let registry = PrometheusRegistry::new();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let text = metrics::with_local_recorder(&registry, || {
            runtime.block_on(async {
                let answered = Arc::new(AtomicUsize::new(0));
                let handler = move |axum::extract::Path(name): axum::extract::Path<String>| {
                    let first = answered.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        match name.as_str() {
                            "retried" if first => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                            "retried" => axum::Json(serde_json::json!({
                                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "retried"},
                            }))
                            .into_response(),
                            _ => (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "3600")]).into_response(),
                        }
                    }
                };
                let app = axum::Router::new()
                    .route("/api/v1/namespaces/default/pods/{name}", axum::routing::get(handler));
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let url = format!("http://{}", listener.local_addr().unwrap());
                tokio::spawn(async move { axum::serve(listener, app).await });
                let client =
                    super::super::client_from_config(kube::Config::new(url.parse().unwrap())).unwrap();
                let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);

                pods.get("retried").await.unwrap();
                let abandoned = tokio::spawn(async move { pods.get("abandoned").await });
                // Given up once its 503 is counted, while the retry waits out the hour asked.
                let host = url.trim_start_matches("http://").to_owned();
                let second_503 =
                    format!("rest_client_requests_total{{code=\"503\",host=\"{host}\",method=\"GET\"}} 2\n");
                for _ in 0..500 {
                    if registry.render().contains(&second_503) {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                abandoned.abort();
                assert!(abandoned.await.is_err(), "given up before its answer");
                registry.render().replace(&host, "H")
            })
        });
        for line in [
            "rest_client_requests_total{code=\"503\",host=\"H\",method=\"GET\"} 2\n",
            "rest_client_requests_total{code=\"200\",host=\"H\",method=\"GET\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(!text.contains("<error>"), "{text}");
    }

    /// Go's `URL.Host` has a port only where the URL writes one.
    #[test]
    fn the_host_is_the_urls_as_written() {
        let registry = PrometheusRegistry::new();
        counted(&registry, async {
            let layer = RequestMetricsLayer::new(&"https://api.example.invalid".parse().unwrap());
            layer.layer(answering(200)).oneshot(request(Method::GET)).await.unwrap();
        });
        assert!(registry.render().contains("host=\"api.example.invalid\""), "{}", registry.render());
    }

    /// A server URL with user information (`https://user:secret@host:6443`) is labelled with its
    /// host and port only, as Go's `URL.Host` is: the password never reaches `/metrics`.
    #[test]
    fn the_host_leaves_out_the_urls_user_information() {
        let registry = PrometheusRegistry::new();
        counted(&registry, async {
            let layer = RequestMetricsLayer::new(&"https://admin:s3cret@127.0.0.1:6443".parse().unwrap());
            layer.layer(answering(200)).oneshot(request(Method::GET)).await.unwrap();
        });
        let text = registry.render();
        assert!(text.contains("host=\"127.0.0.1:6443\""), "{text}");
        assert!(!text.contains("s3cr"), "{text}");
    }
}
