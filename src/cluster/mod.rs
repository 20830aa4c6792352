//! Cluster mode: the agent probes the pods bound to one node, for nodes where nothing else
//! probes (virtual-kubelet nodes, custom runtimes, edge agents). Container states come from
//! the pod status the node's runtime publishes; the agent adds `started` / `ready` and the
//! Ready, ContainersReady and Initialized conditions, and writes them through the syncer.
//! Exec probes run through the API server's `pods/exec`; events are core/v1 Events, counted
//! like the kubelet's (what `kubectl describe pod` shows).
//!
//! The parts: [`watch`] (the node's pods from the API server), [`host`] (the actor that feeds
//! the engine from the watch and acts on probe results), [`exec`] (exec probes through
//! `pods/exec`), [`correlator`] and [`recorder`] (core/v1 Events, as client-go's
//! `tools/record` counts and writes them). [`gates`] is readiness-gate mode, for nodes whose
//! kubelet probes: it writes one condition of its own and nothing else.

pub mod backoff;
pub mod bounded;
pub mod changes;
pub mod correlator;
pub mod exec;
pub mod gates;
pub mod host;
pub mod label_selector;
pub mod recorder;
pub mod request_metrics;
pub mod retry_after;
pub mod token;
pub mod watch;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use probelet_actors::contracts::EventRecorder;
use probelet_actors::status::equality::ConditionOwnership;
use probelet_actors::status::{CONTAINERS_READY, POD_INITIALIZED, POD_READY};
use probelet_actors::sync::rate::RateLimiter;
use probelet_actors::sync::syncer::{Flush, OwnedFields, SyncerConfig, start_syncer};

pub use correlator::{CorrelatedEvent, EventCorrelator};
pub use exec::ExecRunner;
pub use host::{ClusterHost, StopHost};
pub use recorder::{CoreEventRecorder, EVENT_BURST, EVENT_QPS, MAX_PENDING_EVENTS};
pub use watch::pod_watch;

use crate::agent::{AgentError, ClusterSignals, Common};
use crate::cli::RunArgs;
use crate::host::console::say;

/// The User-Agent of every request (kube sends none by default).
pub fn user_agent() -> String {
    format!("probelet/{}", env!("CARGO_PKG_VERSION"))
}

/// The API clients from a kubeconfig file, or the in-cluster configuration ([`Clients`]).
pub async fn clients(kubeconfig: Option<PathBuf>) -> Result<Clients, AgentError> {
    let err = |e: &dyn std::fmt::Display| AgentError::Cluster(e.to_string());
    let source = kubeconfig
        .as_ref()
        .map_or_else(|| "in-cluster configuration".to_owned(), |p| p.display().to_string());
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(&path).map_err(|e| match e {
                // kube's text quotes the path twice over (`'"kc/missing"'`) and names it again
                // after ours: the path once, then what went wrong.
                kube::config::KubeconfigError::ReadConfig(io, _) => {
                    err(&format!("{}: cannot read the kubeconfig: {io}", path.display()))
                }
                e => err(&format!("{}: {e}", path.display())),
            })?;
            if let Some(missing) = missing_user(&kc) {
                return Err(err(&format!("{}: {missing}", path.display())));
            }
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| err(&e))?
        }
        None => kube::Config::incluster().map_err(|e| {
            // kube says only "environment variable not found" outside a pod.
            if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
                err(&format!(
                    "--in-cluster outside a pod (KUBERNETES_SERVICE_HOST is not set): run it in a pod, or give --kubeconfig ({e})"
                ))
            } else {
                err(&e)
            }
        })?,
    };
    if let Ok(value) = http::HeaderValue::from_str(&user_agent()) {
        config.headers.push((http::header::USER_AGENT, value));
    }
    Clients::from_config(config).map_err(|e| err(&format!("{source}: {e}")))
}

/// The agent's two API clients, on one configuration and one token file.
///
/// `writes` is `client` without kube's default retry, for the requests that have a back-off of
/// their own: status writes (the syncer), the readiness-gate condition, the liveness DELETE.
/// kube's retry sends a request again on a 429, 503 or 504, with or without a `Retry-After`,
/// up to 15 times from 5 ms on, none of it counted against `--qps`; with it off the caller sees
/// (and the metrics count) the answers, and waits at least what a `Retry-After` asks for
/// (docs/sync.md, "Queue, budget, retries"), and the pod watch, which waits what a
/// `Retry-After` asks, at most a minute. Events, exec and reviews keep it.
#[derive(Clone)]
pub struct Clients {
    pub client: kube::Client,
    pub writes: kube::Client,
}

impl Clients {
    /// Both clients for `config`, sharing its token file's reader ([`token::TokenFileLayer`]):
    /// a token replaced on disk is read once for both.
    pub fn from_config(config: kube::Config) -> Result<Clients, kube::Error> {
        let (config, token) = prepare(config)?;
        let mut writes = config.clone();
        writes.default_retry = false;
        Ok(Clients { client: build(config, token.as_ref())?, writes: build(writes, token.as_ref())? })
    }
}

/// A current context that names a user the kubeconfig does not have: kube would go on without
/// credentials, and every request would be anonymous; client-go refuses it, in these words.
fn missing_user(kc: &kube::config::Kubeconfig) -> Option<String> {
    let name = kc.current_context.as_deref()?;
    let context = kc.contexts.iter().find(|c| c.name == name)?.context.as_ref()?;
    let user = context.user.as_deref().filter(|u| !u.is_empty())?;
    (!kc.auth_infos.iter().any(|a| a.name == user))
        .then(|| format!("user {user:?} was not found for context {name:?}"))
}

/// The API client for `config`, with the pod watch's requests paced
/// ([`watch::WatchPacingLayer`]), a token file's token trimmed ([`token::TokenFileLayer`]), a
/// throttling answer's `Retry-After` kept in kube's error ([`retry_after`]), an answer that
/// stops coming given up and one that does not end refused ([`bounded`]), and every request
/// counted ([`request_metrics`]).
pub fn client_from_config(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let (config, token) = prepare(config)?;
    build(config, token.as_ref())
}

/// `config` with its inline token trimmed, and its token file (taken out of it) as a layer.
fn prepare(mut config: kube::Config) -> Result<(kube::Config, Option<token::TokenFileLayer>), kube::Error> {
    // An inline token is trimmed as a token file's is (a YAML block scalar, `token: |`, ends in
    // a newline), and one that still cannot be a header is an error: kube's auth layer panics
    // on it.
    if let Some(token) = config.auth_info.token.take() {
        use secrecy::ExposeSecret as _;
        let trimmed = token.expose_secret().trim().to_owned();
        if let Err(invalid) = http::HeaderValue::from_str(&format!("Bearer {trimmed}")) {
            return Err(kube::Error::Auth(kube::client::AuthError::InvalidBearerToken(invalid)));
        }
        config.auth_info.token = Some(trimmed.into());
    }
    // A token file that cannot be read is an error at start, as kube's own reading of it is.
    let token = match config.auth_info.token_file.take() {
        Some(path) if config.auth_info.token.is_none() => {
            Some(token::TokenFileLayer::new(&path).map_err(|source| {
                kube::Error::Auth(kube::client::AuthError::ReadTokenFile(source, path.into()))
            })?)
        }
        _ => None,
    };
    Ok((config, token))
}

/// The client for a [`prepare`]d configuration.
fn build(
    mut config: kube::Config,
    token: Option<&token::TokenFileLayer>,
) -> Result<kube::Client, kube::Error> {
    /// The requests the buffer in front of kube's retry holds, as many as kube's client's own.
    const RETRY_BUFFER: usize = 1024;
    let counted = request_metrics::RequestMetricsLayer::new(&config.cluster_url);
    // kube's retry, taken out of kube's stack (where it sat inside every layer of ours) and put
    // just outside the count, so that each attempt's answer is counted, as client-go counts it
    // (`request_metrics`). A retry calls its inner service again, and kube's stack is boxed,
    // which cannot be cloned: a buffer in front of it, as kube's client has one in front of all.
    let retry = std::mem::replace(&mut config.default_retry, false).then(|| {
        tower::ServiceBuilder::new()
            .layer(tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()))
            .layer(tower::buffer::BufferLayer::new(RETRY_BUFFER))
            .into_inner()
    });
    // Innermost, the count: a request paced and never sent is not counted at all. The bounds
    // outside the retry, as kube's retry was inside them: the wait for headers bounds a request
    // with its retries. Inside the pacing, so that its wait before a request is not silence.
    let builder = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&counted)
        .with_layer(&tower::util::option_layer(retry))
        .with_layer(&bounded::BoundedAnswerLayer::default())
        .with_layer(&retry_after::RetryAfterLayer)
        .with_layer(&watch::WatchPacingLayer::default());
    Ok(match token {
        Some(token) => builder.with_layer(token).build(),
        None => builder.build(),
    })
}

/// Cluster mode until SIGTERM; then stop probing and flush pending status writes.
pub async fn run_cluster(args: &RunArgs, kubeconfig: Option<PathBuf>) -> Result<(), AgentError> {
    // First: a request to stop from here on ends the agent, whatever start-up is waiting for.
    let signals = ClusterSignals::listen()?;
    let Clients { client, writes } = clients(kubeconfig).await?;
    let mut common = Common::new(&args.node_name)?;
    common.configure(args);
    let limiter = RateLimiter::new(args.qps, args.burst);
    // Exec probes have their own budget, as events do: a node full of exec probes must not
    // delay the status writes the probes are for.
    let exec = ExecRunner::new(client.clone(), RateLimiter::new(args.exec_qps, args.exec_burst));
    let recorder = CoreEventRecorder::new(
        client.clone(),
        RateLimiter::new(EVENT_QPS, EVENT_BURST),
        args.node_name.clone(),
        common.events.clone(),
    );
    let recorder: Arc<dyn EventRecorder> = Arc::new(recorder);
    let pipeline = common.pipeline_with(Arc::new(exec.clone()), recorder.clone());
    // The listener before the syncer: an error here (a certificate, a port in use) returns
    // before any actor with timers runs, which actix would otherwise poll as the runtime is
    // dropped and which would panic without a reactor, before the error was printed.
    // Reviews go through the client without kube's retry: a server failing fast would
    // otherwise get a dozen reviews for each turn of the review limiter.
    let (base, stop_server, server) = common.serve(args, pipeline.clone(), Some(writes.clone())).await?;
    let mut config = SyncerConfig::new(
        writes.clone(),
        Arc::new(common.pods.clone()),
        pipeline.status_manager.clone(),
        common.clock.clone(),
    );
    config.limiter = limiter.clone();
    // The node's runtime owns phase, IPs and container states; the agent writes only
    // readiness: ready/started and the conditions it generates from them.
    config.owned_fields = OwnedFields::ReadinessOnly;
    config.ownership =
        ConditionOwnership::new([POD_READY, CONTAINERS_READY, POD_INITIALIZED], Vec::<String>::new());
    let syncer = start_syncer(config);
    say(format_args!(
        "probelet {}: cluster mode, node {}; {base}/pods, /metrics{}",
        env!("CARGO_PKG_VERSION"),
        args.node_name,
        base.health_note()
    ));

    let host = ClusterHost {
        writes: writes.clone(),
        pipeline: pipeline.clone(),
        pods: common.pods.clone(),
        history: common.history.clone(),
        exec,
        syncer: syncer.clone(),
        limiter,
        liveness_action: args.liveness_action,
        ready: common.ready.clone(),
        deleting: HashSet::new(),
        watch: Default::default(),
        recorder,
        syncs: Default::default(),
        node_name: args.node_name.clone(),
    };
    // Without kube's retry, which would sleep out a `Retry-After` inside the list request: the
    // watch waits what the server asks (at most a minute) and says so.
    let watch = pod_watch(
        writes.clone(),
        &args.node_name,
        args.pod_selector.as_ref().and_then(label_selector::LabelSelector::query),
    );
    let host = ClusterHost::create(move |ctx| {
        ctx.add_stream(watch);
        host
    });
    pipeline.subscribe_results(host.clone().recipient());

    let shutdown = async {
        // The host first: a sync of a pod whose probes have stopped would write it ready.
        let _ = host.send(StopHost).await;
        for pod in common.pods.pods() {
            pipeline.remove_pod(pod);
        }
        let _ = tokio::time::timeout(FLUSH_WAIT_MAX, syncer.send(Flush)).await;
        let _ = stop_server.send(());
        let _ = server.await;
    };
    // A second request to stop leaves the writes still owed to the next agent, which writes
    // each pod's status afresh from its own probes (docs/sync.md, §7.5).
    signals
        .stop_on_signal(
            "probelet: shutting down, flushing status writes",
            shutdown,
            "probelet: shutdown forced, status writes still owed are not waited for",
        )
        .await;
    Ok(())
}

/// How long the shutdown waits for the status writes still owed.
const FLUSH_WAIT_MAX: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn config(token: &str) -> kube::Config {
        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().expect("a URL"));
        config.auth_info.token = Some(token.to_owned().into());
        config
    }

    /// A context whose user is not in the kubeconfig is refused, as client-go refuses it, not
    /// run without credentials.
    #[test]
    fn a_context_naming_a_missing_user_is_refused() {
        let kc = |user: &str| {
            kube::config::Kubeconfig::from_yaml(&format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n\
                 clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:6443'}}}}]\n\
                 users: [{{name: me, user: {{token: t}}}}]\n\
                 contexts: [{{name: ctx, context: {{cluster: c, user: {user}}}}}]\n"
            ))
            .expect("a kubeconfig")
        };
        assert_eq!(
            missing_user(&kc("nobody")).as_deref(),
            Some(r#"user "nobody" was not found for context "ctx""#)
        );
        assert_eq!(missing_user(&kc("me")), None);
        assert_eq!(missing_user(&kc("''")), None, "no user: anonymous on purpose");
    }

    /// A kubeconfig that cannot be read is named once, unquoted, then the reason (kube's own
    /// text quoted it twice over, after our naming of it).
    #[tokio::test]
    async fn a_kubeconfig_that_cannot_be_read_is_named_once() {
        let path = std::env::temp_dir().join(format!("probelet-no-kubeconfig-{}", std::process::id()));
        let err = clients(Some(path.clone())).await.err().expect("refused").to_string();
        assert_eq!(
            err,
            format!(
                "cluster: {}: cannot read the kubeconfig: No such file or directory (os error 2)",
                path.display()
            )
        );
    }

    /// A kubeconfig's inline token written as a YAML block scalar ends in a newline: it is
    /// trimmed, and one that cannot be a header at all is an error, where kube's auth layer
    /// panicked on either.
    #[tokio::test]
    async fn an_inline_token_is_trimmed_and_an_unusable_one_is_an_error() {
        assert!(client_from_config(config("abc\n")).is_ok());
        let err = client_from_config(config("a\nb")).err().expect("refused");
        assert!(err.to_string().contains("invalid bearer token"), "{err}");
    }
}
