//! The bearer token of a kubeconfig's `tokenFile` (or the in-cluster service account token),
//! sent on every API request: read again at most every minute, keeping the last token when a
//! read fails, and trimmed of surrounding white space, as client-go reads it
//! (`transport.NewCachedFileTokenSource`). kube reads the file the same way but keeps the
//! white space: a file written by `echo TOKEN > file` (a trailing newline, the usual way) made
//! every request fail with "invalid bearer token: failed to parse header value", forever.
//! A 401 answer makes the next request read the file again at once (client-go's
//! `ResetTokenOlderThan`): a token revoked and replaced on disk then costs one failed request,
//! not a minute of them.
//! Written by hand as a tower layer on kube's client: kube has no hook for how it reads the
//! file.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::HeaderValue;
use tokio::time::Instant;

/// How long a token read from the file is used before the file is read again (kube's and
/// client-go's minute).
pub const TOKEN_FILE_REFRESH: Duration = Duration::from_secs(60);

/// The layer: sets `Authorization: Bearer <token>` from the file on every request.
#[derive(Debug, Clone)]
pub struct TokenFileLayer(Arc<Mutex<TokenFile>>);

#[derive(Debug)]
struct TokenFile {
    path: PathBuf,
    header: Option<HeaderValue>,
    read_at: Option<Instant>,
}

impl TokenFileLayer {
    /// Reads the file now: a token file that cannot be read or holds no usable token is an
    /// error at start, as with kube.
    pub fn new(path: impl Into<PathBuf>) -> std::io::Result<Self> {
        let path = path.into();
        let header = read_header(&path)?;
        let file = TokenFile { path, header: Some(header), read_at: Some(Instant::now()) };
        Ok(TokenFileLayer(Arc::new(Mutex::new(file))))
    }

    /// The header to send now, the file read again if the last read is a minute old.
    fn header(&self) -> Option<HeaderValue> {
        let mut file = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if file.read_at.is_none_or(|at| now.saturating_duration_since(at) >= TOKEN_FILE_REFRESH) {
            match read_header(&file.path) {
                Ok(header) => file.header = Some(header),
                // Kept: a token file removed after the start must not break the agent
                // (kubernetes#68164, as client-go and kube do).
                Err(error) => {
                    tracing::warn!(path = %file.path.display(), %error, "cannot read the API token file again; keeping the last token")
                }
            }
            file.read_at = Some(now);
        }
        file.header.clone()
    }
}

impl TokenFileLayer {
    /// A request sent at `sent` was refused (401): the token read before it is read again at
    /// the next request. A token read after it (another request's reset) stays.
    fn refused(&self, sent: Instant) {
        let mut file = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if file.read_at.is_some_and(|at| at <= sent) {
            file.read_at = None;
        }
    }
}

fn read_header(path: &std::path::Path) -> std::io::Result<HeaderValue> {
    let text = std::fs::read_to_string(path)?;
    let token = text.trim();
    if token.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "the token file is empty"));
    }
    let mut header = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "the token is not a valid header value")
    })?;
    header.set_sensitive(true);
    Ok(header)
}

impl<S> tower::Layer<S> for TokenFileLayer {
    type Service = WithTokenFile<S>;

    fn layer(&self, inner: S) -> WithTokenFile<S> {
        WithTokenFile { inner, token: self.clone() }
    }
}

/// The service of [`TokenFileLayer`].
#[derive(Debug, Clone)]
pub struct WithTokenFile<S> {
    inner: S,
    token: TokenFileLayer,
}

impl<S, B, RB> tower::Service<http::Request<B>> for WithTokenFile<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let sent = Instant::now();
        if let Some(header) = self.token.header() {
            request.headers_mut().insert(http::header::AUTHORIZATION, header);
        }
        let response = self.inner.call(request);
        let token = self.token.clone();
        Box::pin(async move {
            let response = response.await;
            if response.as_ref().is_ok_and(|r| r.status() == http::StatusCode::UNAUTHORIZED) {
                token.refused(sent);
            }
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer as _, Service as _, ServiceExt as _};

    /// The Authorization header the service sent (the echo service answers with it).
    async fn sent_header(
        service: &mut WithTokenFile<
            impl tower::Service<
                http::Request<()>,
                Response = http::Response<Option<HeaderValue>>,
                Error = std::convert::Infallible,
                Future: Send + 'static,
            >,
        >,
    ) -> Option<HeaderValue> {
        service.ready().await.unwrap();
        service.call(http::Request::new(())).await.unwrap().into_body()
    }

    /// An API server that echoes the Authorization header, refusing (401) any token but
    /// `accepted`'s when it is set.
    fn echo(
        accepted: Option<&'static str>,
    ) -> impl tower::Service<
        http::Request<()>,
        Response = http::Response<Option<HeaderValue>>,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone {
        tower::service_fn(move |request: http::Request<()>| async move {
            let header = request.headers().get(http::header::AUTHORIZATION).cloned();
            let mut response = http::Response::new(header.clone());
            if accepted.is_some_and(|token| header.as_ref().is_none_or(|h| h != token)) {
                *response.status_mut() = http::StatusCode::UNAUTHORIZED;
            }
            Ok::<_, std::convert::Infallible>(response)
        })
    }

    /// A 401 makes the next request read the file again at once: a token revoked and replaced
    /// on disk costs one refused request, not a minute of them.
    #[tokio::test(start_paused = true)]
    async fn a_refused_token_is_read_again_at_the_next_request() {
        let path = std::env::temp_dir().join(format!("probelet-token-401-{}", std::process::id()));
        std::fs::write(&path, "old\n").unwrap();
        let layer = TokenFileLayer::new(&path).unwrap();
        let mut service = layer.layer(echo(Some("Bearer new")));
        std::fs::write(&path, "new\n").unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(sent_header(&mut service).await.unwrap(), "Bearer old", "refused, and read again");
        assert_eq!(sent_header(&mut service).await.unwrap(), "Bearer new", "within the minute");
        std::fs::remove_file(&path).unwrap();
    }

    /// A token file with a trailing newline is sent trimmed; the file is read again once a
    /// minute has passed, and a failed read keeps the last token.
    #[tokio::test(start_paused = true)]
    async fn the_token_is_trimmed_and_read_again_each_minute() {
        let path = std::env::temp_dir().join(format!("probelet-token-{}", std::process::id()));
        std::fs::write(&path, "token-one\n").unwrap();
        let layer = TokenFileLayer::new(&path).unwrap();
        let mut service = layer.layer(echo(None));
        assert_eq!(sent_header(&mut service).await.unwrap(), "Bearer token-one");

        std::fs::write(&path, "  token-two\r\n").unwrap();
        assert_eq!(sent_header(&mut service).await.unwrap(), "Bearer token-one", "not a minute yet");
        tokio::time::advance(TOKEN_FILE_REFRESH).await;
        assert_eq!(sent_header(&mut service).await.unwrap(), "Bearer token-two");

        std::fs::remove_file(&path).unwrap();
        tokio::time::advance(TOKEN_FILE_REFRESH).await;
        assert_eq!(sent_header(&mut service).await.unwrap(), "Bearer token-two", "the last token is kept");
    }

    #[test]
    fn an_empty_or_missing_token_file_is_an_error_at_start() {
        let path = std::env::temp_dir().join(format!("probelet-token-empty-{}", std::process::id()));
        std::fs::write(&path, "\n").unwrap();
        assert!(TokenFileLayer::new(&path).is_err());
        std::fs::remove_file(&path).unwrap();
        assert!(TokenFileLayer::new(&path).is_err());
    }
}
