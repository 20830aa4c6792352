//! Metrics: the names, labels and descriptions the engine emits, and [`PrometheusRegistry`], a
//! `metrics` recorder that keeps series in memory, forgets them on request and renders the
//! Prometheus text format 0.0.4 with real histogram buckets.
//!
//! Upstream: `pkg/kubelet/prober/prober_manager.go` (`ProberResults`, `ProberDuration`) and the
//! text exposition of `prometheus/client_golang` (`expfmt`). The library emits only through the
//! `metrics` facade macros; this recorder exists because the kubelet deletes a probe worker's
//! series when the worker exits (`DeletePartialMatch`), which neither the facade nor
//! `metrics-exporter-prometheus` can do, and because histograms must render as histograms.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use metrics_util::registry::{Registry, Storage};

/// Probe results by probe type and result (counter). Upstream `ProberResults`.
pub const PROBER_PROBE_TOTAL: &str = "prober_probe_total";
/// Probe response durations (histogram). Upstream `ProberDuration`.
pub const PROBER_PROBE_DURATION_SECONDS: &str = "prober_probe_duration_seconds";
/// Running probe workers by probe type (gauge). probelet's own.
pub const PROBELET_PROBE_WORKERS: &str = "probelet_probe_workers";
/// Workers restarted after dying abnormally (counter). probelet's own.
pub const PROBELET_WORKER_RESTARTS_TOTAL: &str = "probelet_worker_restarts_total";
/// Probes that errored after their retries and were discarded (counter). probelet's own.
pub const PROBELET_PROBE_ERRORS_TOTAL: &str = "probelet_probe_errors_total";
/// Probes that waited for a free probe slot before they ran (counter): the node had as many
/// probes in flight as the pipeline allows. probelet's own.
pub const PROBELET_PROBES_DELAYED_TOTAL: &str = "probelet_probes_delayed_total";

/// Status syncs by outcome (`updated`, `unchanged`, `not_found`, `recreated`, `invalid`, `conflict`,
/// `error`, `deleted`).
pub const PROBELET_STATUS_SYNCS_TOTAL: &str = "probelet_status_syncs_total";
/// The status syncer's API requests (the GET, PATCH and DELETE of its pod writes), by verb and
/// HTTP code (`0` when no response came). A cluster host's watch, events, `pods/exec` and
/// reviews are not counted here.
pub const PROBELET_API_REQUESTS_TOTAL: &str = "probelet_api_requests_total";
/// Every request of the agent's API clients, by HTTP code (`<error>` when none came), method
/// and the API server's `host:port` (counter). client-go's `requestResult`, which a kubelet's
/// `/metrics` exports; the agent's clients count it, the engine does not.
pub const REST_CLIENT_REQUESTS_TOTAL: &str = "rest_client_requests_total";
/// Seconds from a status change to its successful write.
pub const PROBELET_STATUS_SYNC_DURATION_SECONDS: &str = "probelet_status_sync_duration_seconds";
/// Cluster mode: `ready` / `started` flags the agent had written true and someone else (the
/// node's runtime) reset while the agent's probes still said true, by field (counter). Each one
/// costs a re-patch, and the pod is NotReady in between.
pub const PROBELET_RUNTIME_RESETS_TOTAL: &str = "probelet_runtime_resets_total";

/// Help text of [`PROBER_PROBE_TOTAL`]. The kubelet's metrics framework prefixes the stability
/// level, and that is what scrapers of a kubelet see.
pub const PROBER_PROBE_TOTAL_HELP: &str =
    "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.";
/// Help text of [`PROBER_PROBE_DURATION_SECONDS`].
pub const PROBER_PROBE_DURATION_SECONDS_HELP: &str = "[ALPHA] Duration in seconds for a probe response.";
/// Help text of [`PROBELET_STATUS_SYNCS_TOTAL`].
pub const PROBELET_STATUS_SYNCS_TOTAL_HELP: &str = "Pod status syncs to the API server by outcome.";
/// Help text of [`PROBELET_API_REQUESTS_TOTAL`].
pub const PROBELET_API_REQUESTS_TOTAL_HELP: &str =
    "Pod status requests the status syncer sent to the API server by verb and response code.";
/// Help text of [`REST_CLIENT_REQUESTS_TOTAL`], with the stability level the kubelet's metrics
/// framework puts before it.
pub const REST_CLIENT_REQUESTS_TOTAL_HELP: &str =
    "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.";
/// Help text of [`PROBELET_STATUS_SYNC_DURATION_SECONDS`].
pub const PROBELET_STATUS_SYNC_DURATION_SECONDS_HELP: &str =
    "Seconds from a pod status change to its successful write to the API server.";
/// Help text of [`PROBELET_RUNTIME_RESETS_TOTAL`].
pub const PROBELET_RUNTIME_RESETS_TOTAL_HELP: &str =
    "Container ready or started flags reset by another writer while the probes said true.";
/// Help text of [`PROBELET_PROBE_WORKERS`].
pub const PROBELET_PROBE_WORKERS_HELP: &str = "Number of running probe workers by probe type.";
/// Help text of [`PROBELET_WORKER_RESTARTS_TOTAL`].
pub const PROBELET_WORKER_RESTARTS_TOTAL_HELP: &str = "Probe workers restarted after they died abnormally.";
/// Help text of [`PROBELET_PROBES_DELAYED_TOTAL`].
pub const PROBELET_PROBES_DELAYED_TOTAL_HELP: &str =
    "Probes that waited for a free probe slot (the limit on probes in flight) before they ran.";
/// Help text of [`PROBELET_PROBE_ERRORS_TOTAL`].
pub const PROBELET_PROBE_ERRORS_TOTAL_HELP: &str =
    "Probes that errored after their retries and were discarded.";

/// Label: `Liveness`, `Readiness` or `Startup` ([`crate::prober::ProbeKind::as_str`]).
pub const LABEL_PROBE_TYPE: &str = "probe_type";
/// Label: one of [`RESULT_SUCCESSFUL`], [`RESULT_FAILED`], [`RESULT_UNKNOWN`].
pub const LABEL_RESULT: &str = "result";
/// Label: the container name.
pub const LABEL_CONTAINER: &str = "container";
/// Label: the pod name.
pub const LABEL_POD: &str = "pod";
/// Label: the pod namespace.
pub const LABEL_NAMESPACE: &str = "namespace";
/// Label: the pod UID.
pub const LABEL_POD_UID: &str = "pod_uid";

/// `result` label value for a successful probe.
pub const RESULT_SUCCESSFUL: &str = "successful";
/// `result` label value for a failed probe.
pub const RESULT_FAILED: &str = "failed";
/// `result` label value for any other probe result.
pub const RESULT_UNKNOWN: &str = "unknown";

/// Prometheus default buckets (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10).
pub const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The metric kinds, in the order the text format names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn type_name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Every metric the engine emits, with its kind and help text.
const DESCRIPTIONS: [(&str, Kind, &str); 11] = [
    (PROBER_PROBE_TOTAL, Kind::Counter, PROBER_PROBE_TOTAL_HELP),
    (PROBER_PROBE_DURATION_SECONDS, Kind::Histogram, PROBER_PROBE_DURATION_SECONDS_HELP),
    (PROBELET_PROBE_WORKERS, Kind::Gauge, PROBELET_PROBE_WORKERS_HELP),
    (PROBELET_WORKER_RESTARTS_TOTAL, Kind::Counter, PROBELET_WORKER_RESTARTS_TOTAL_HELP),
    (PROBELET_PROBE_ERRORS_TOTAL, Kind::Counter, PROBELET_PROBE_ERRORS_TOTAL_HELP),
    (PROBELET_PROBES_DELAYED_TOTAL, Kind::Counter, PROBELET_PROBES_DELAYED_TOTAL_HELP),
    (PROBELET_STATUS_SYNCS_TOTAL, Kind::Counter, PROBELET_STATUS_SYNCS_TOTAL_HELP),
    (PROBELET_API_REQUESTS_TOTAL, Kind::Counter, PROBELET_API_REQUESTS_TOTAL_HELP),
    (REST_CLIENT_REQUESTS_TOTAL, Kind::Counter, REST_CLIENT_REQUESTS_TOTAL_HELP),
    (PROBELET_STATUS_SYNC_DURATION_SECONDS, Kind::Histogram, PROBELET_STATUS_SYNC_DURATION_SECONDS_HELP),
    (PROBELET_RUNTIME_RESETS_TOTAL, Kind::Counter, PROBELET_RUNTIME_RESETS_TOTAL_HELP),
];

/// Registers every description above through `metrics::describe_*` (call after installing a
/// recorder; [`PrometheusRegistry::global`] does it itself).
pub fn describe() {
    for (name, kind, help) in DESCRIPTIONS {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, help),
            Kind::Gauge => metrics::describe_gauge!(name, help),
            Kind::Histogram => metrics::describe_histogram!(name, help),
        }
    }
}

/// Describes every metric straight into `recorder`, bypassing any thread-local recorder that
/// the facade macros would pick instead.
fn describe_into(recorder: &dyn Recorder) {
    for (name, kind, help) in DESCRIPTIONS {
        let (key, help) = (KeyName::from_const_str(name), SharedString::const_str(help));
        match kind {
            Kind::Counter => recorder.describe_counter(key, None, help),
            Kind::Gauge => recorder.describe_gauge(key, None, help),
            Kind::Histogram => recorder.describe_histogram(key, None, help),
        }
    }
}

/// Errors of the metrics registry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetricsError {
    /// `metrics` allows one global recorder per process and someone else installed theirs.
    #[error("another metrics recorder is already installed as the global recorder")]
    AnotherRecorderInstalled,
    /// Histogram bucket bounds must be strictly increasing numbers.
    #[error("invalid buckets for histogram {name:?}: {reason}")]
    InvalidBuckets {
        /// The histogram's metric name.
        name: String,
        /// What is wrong with the bounds (a NaN, a +Inf before the end, not increasing).
        reason: &'static str,
    },
}

/// Checks upper bounds like client_golang's `NewHistogram` (which panics instead): strictly
/// increasing, no NaN; a trailing +Inf is dropped because the +Inf bucket is always implicit.
fn validate_buckets(name: &str, buckets: &[f64]) -> Result<Arc<[f64]>, MetricsError> {
    let invalid = |reason| MetricsError::InvalidBuckets { name: name.to_owned(), reason };
    let bounds = match buckets.split_last() {
        Some((last, rest)) if *last == f64::INFINITY => rest,
        _ => buckets,
    };
    if bounds.iter().any(|b| b.is_nan()) {
        return Err(invalid("a bucket bound is NaN"));
    }
    if bounds.contains(&f64::INFINITY) {
        return Err(invalid("+Inf may only be the last bound"));
    }
    if bounds.windows(2).any(|w| w[0] >= w[1]) {
        return Err(invalid("bucket bounds must be strictly increasing"));
    }
    Ok(bounds.into())
}

// === impl FixedHistogram ===

/// A histogram with fixed upper bounds, recorded lock-free from any thread.
///
/// The first buckets are kept inline, after the sum: a probe worker's observation then
/// writes one piece of memory rather than two (its handle's and a separate bucket array's),
/// which counts at a thousand workers each probing once a second (docs/benchmarks.md).
/// `repr(C)` keeps that order.
#[derive(Debug)]
#[repr(C)]
struct FixedHistogram {
    /// Upper bounds (`le`), strictly increasing, without the implicit +Inf.
    bounds: Arc<[f64]>,
    /// Sum of all observations, as `f64` bits.
    sum: AtomicU64,
    /// The number of buckets: one per bound, and the +Inf overflow.
    len: usize,
    /// Non-cumulative observation counts per bucket, the first [`INLINE_BUCKETS`] here and any
    /// further ones in `more`; the last bucket is the +Inf overflow. The total count is their
    /// sum, so `_count` always equals the `+Inf` bucket in a render.
    inline: [AtomicU64; INLINE_BUCKETS],
    more: Box<[AtomicU64]>,
}

/// Buckets kept inline: the default bounds and the +Inf overflow.
const INLINE_BUCKETS: usize = DEFAULT_BUCKETS.len() + 1;

/// A consistent-enough copy of a histogram for rendering.
#[derive(Debug, Clone, PartialEq)]
struct HistogramSnapshot {
    /// Upper bounds without +Inf.
    bounds: Arc<[f64]>,
    /// Cumulative counts, one per bound plus the final +Inf.
    cumulative: Vec<u64>,
    /// Sum of observations.
    sum: f64,
}

impl FixedHistogram {
    fn new(bounds: Arc<[f64]>) -> Self {
        let len = bounds.len() + 1;
        let more = (INLINE_BUCKETS..len).map(|_| AtomicU64::new(0)).collect();
        FixedHistogram {
            bounds,
            sum: AtomicU64::new(0f64.to_bits()),
            len,
            inline: std::array::from_fn(|_| AtomicU64::new(0)),
            more,
        }
    }

    /// Bucket `index`, if there is one.
    fn bucket(&self, index: usize) -> Option<&AtomicU64> {
        if index >= self.len {
            return None;
        }
        match index.checked_sub(INLINE_BUCKETS) {
            None => self.inline.get(index),
            Some(further) => self.more.get(further),
        }
    }

    /// Every bucket, in order.
    fn buckets(&self) -> impl Iterator<Item = &AtomicU64> {
        self.inline.iter().chain(self.more.iter()).take(self.len)
    }

    /// The bucket an observation falls in: the first bound `>= value` (`le` semantics); NaN goes
    /// to +Inf as in client_golang (`sort.SearchFloat64s`).
    fn bucket_index(&self, value: f64) -> usize {
        if value.is_nan() { self.bounds.len() } else { self.bounds.partition_point(|b| *b < value) }
    }

    fn observe(&self, value: f64, count: u64) {
        if count == 0 {
            return;
        }
        // Bounds checked: there are `bounds.len() + 1` buckets and the index is at most that len.
        if let Some(bucket) = self.bucket(self.bucket_index(value)) {
            bucket.fetch_add(count, Ordering::Relaxed);
        }
        let add = value * count as f64;
        let _ = self.sum.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |bits| {
            Some((f64::from_bits(bits) + add).to_bits())
        });
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0u64;
        let cumulative = self
            .buckets()
            .map(|b| {
                total = total.saturating_add(b.load(Ordering::Acquire));
                total
            })
            .collect();
        HistogramSnapshot {
            bounds: Arc::clone(&self.bounds),
            cumulative,
            sum: f64::from_bits(self.sum.load(Ordering::Acquire)),
        }
    }
}

impl HistogramFn for FixedHistogram {
    fn record(&self, value: f64) {
        self.observe(value, 1);
    }

    fn record_many(&self, value: f64, count: usize) {
        self.observe(value, u64::try_from(count).unwrap_or(u64::MAX));
    }
}

// === impl BucketStorage ===

/// `metrics_util` storage: atomic counters and gauges, and fixed-bucket histograms whose bounds
/// depend on the metric name.
#[derive(Debug)]
struct BucketStorage {
    /// Name-specific bucket bounds; names not listed use [`DEFAULT_BUCKETS`].
    buckets: RwLock<HashMap<String, Arc<[f64]>>>,
    /// [`DEFAULT_BUCKETS`], shared by every histogram that uses them.
    default_buckets: Arc<[f64]>,
}

impl Storage<Key> for BucketStorage {
    type Counter = Arc<AtomicU64>;
    type Gauge = Arc<AtomicU64>;
    type Histogram = Arc<FixedHistogram>;

    fn counter(&self, _: &Key) -> Self::Counter {
        Arc::new(AtomicU64::new(0))
    }

    fn gauge(&self, _: &Key) -> Self::Gauge {
        Arc::new(AtomicU64::new(0f64.to_bits()))
    }

    fn histogram(&self, key: &Key) -> Self::Histogram {
        let buckets = self.buckets.read().unwrap_or_else(PoisonError::into_inner);
        let bounds = buckets.get(key.name()).unwrap_or(&self.default_buckets);
        Arc::new(FixedHistogram::new(Arc::clone(bounds)))
    }
}

// === impl PrometheusRegistry ===

/// A `metrics::Recorder` that keeps series in memory, forgets them on request and renders
/// Prometheus text.
#[derive(Debug)]
pub struct PrometheusRegistry {
    /// Every live series, sharded by key hash; recording takes only a shard read lock.
    registry: Registry<Key, BucketStorage>,
    /// HELP text by metric name, from the `describe_*` calls.
    descriptions: RwLock<HashMap<String, SharedString>>,
}

/// Counts the [`PrometheusRegistry::forget`] calls that forgot a series, in any registry: a
/// caller that keeps handles looks them up again when it changed.
static FORGET_EPOCH: AtomicU64 = AtomicU64::new(0);

/// The number of forgets so far that removed a series: handles looked up before a change may
/// no longer reach their registry.
pub fn forget_epoch() -> u64 {
    FORGET_EPOCH.load(Ordering::Acquire)
}

/// The process-global registry: `None` if another recorder won the installation.
static GLOBAL: OnceLock<Option<Arc<PrometheusRegistry>>> = OnceLock::new();

impl Default for PrometheusRegistry {
    fn default() -> Self {
        Self::new()
    }
}

/// What kind of series [`PrometheusRegistry::forget_exact`] forgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesKind {
    /// A counter.
    Counter,
    /// A gauge.
    Gauge,
    /// A histogram.
    Histogram,
}

impl PrometheusRegistry {
    /// An empty registry, not installed anywhere (use `metrics::with_local_recorder` or
    /// [`PrometheusRegistry::global`]).
    pub fn new() -> Self {
        let storage = BucketStorage {
            buckets: RwLock::new(HashMap::new()),
            default_buckets: Arc::from(DEFAULT_BUCKETS.as_slice()),
        };
        PrometheusRegistry { registry: Registry::new(storage), descriptions: RwLock::new(HashMap::new()) }
    }

    /// Installs a process-global registry as the `metrics` global recorder and describes every
    /// metric. Idempotent: later calls return the same registry. Fails, on every call, if
    /// another global recorder was installed first.
    pub fn global() -> Result<Arc<PrometheusRegistry>, MetricsError> {
        GLOBAL
            .get_or_init(|| {
                let registry = Arc::new(PrometheusRegistry::new());
                metrics::set_global_recorder(Arc::clone(&registry)).ok()?;
                describe_into(&*registry);
                Some(registry)
            })
            .clone()
            .ok_or(MetricsError::AnotherRecorderInstalled)
    }

    /// Uses `buckets` for histograms named `name` created from now on (series that already exist
    /// keep their bounds until forgotten). A trailing +Inf is accepted and implied otherwise.
    pub fn set_buckets(&self, name: &str, buckets: &[f64]) -> Result<(), MetricsError> {
        let bounds = validate_buckets(name, buckets)?;
        let mut config = self.registry.storage().buckets.write().unwrap_or_else(PoisonError::into_inner);
        config.insert(name.to_owned(), bounds);
        Ok(())
    }

    /// Forgets every series of `name` (any kind) whose labels include all of `labels`, like
    /// client_golang's `DeletePartialMatch`; an empty `labels` forgets every series of `name`.
    /// Returns how many series were forgotten. A handle still held by a caller keeps working
    /// but no longer reaches this registry; the next macro call starts the series from zero.
    pub fn forget(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        let mut forgotten = 0;
        let mut keep = |key: &Key| {
            let matches = key.name() == name
                && labels.iter().all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v));
            forgotten += usize::from(matches);
            !matches
        };
        self.registry.retain_counters(|key, _| keep(key));
        self.registry.retain_gauges(|key, _| keep(key));
        self.registry.retain_histograms(|key, _| keep(key));
        if forgotten > 0 {
            FORGET_EPOCH.fetch_add(1, Ordering::Release);
        }
        forgotten
    }

    /// Forgets the one `kind` series of `name` whose labels are exactly `labels`, in the order
    /// the series was created with: one hash lookup, where [`PrometheusRegistry::forget`] scans
    /// every series. A worker's exit forgets its own series this way, so a burst of n exits
    /// costs n lookups instead of n scans of every worker's series (docs/benchmarks.md,
    /// overload); the names and label names are static, so only the label values are copied
    /// into the key. Returns whether a series was forgotten.
    pub fn forget_exact(
        &self,
        kind: SeriesKind,
        name: &'static str,
        labels: &[(&'static str, &str)],
    ) -> bool {
        let labels: Vec<Label> = labels.iter().map(|&(k, v)| Label::new(k, v.to_owned())).collect();
        let key = Key::from_parts(name, labels);
        let forgotten = match kind {
            SeriesKind::Counter => self.registry.delete_counter(&key),
            SeriesKind::Gauge => self.registry.delete_gauge(&key),
            SeriesKind::Histogram => self.registry.delete_histogram(&key),
        };
        if forgotten {
            FORGET_EPOCH.fetch_add(1, Ordering::Release);
        }
        forgotten
    }

    /// Renders every series in the Prometheus text format 0.0.4: families sorted by name, series
    /// by their labels (themselves sorted by label name, as client_golang does), numbers
    /// formatted like Go's `strconv.FormatFloat(v, 'g', -1, 64)`.
    pub fn render(&self) -> String {
        let mut families: BTreeMap<(String, Kind), Vec<(Labels, Sample)>> = BTreeMap::new();
        let mut add = |key: &Key, kind, sample| {
            let name = sanitize_metric_name(key.name());
            families.entry((name, kind)).or_default().push((sorted_labels(key), sample));
        };
        self.registry.visit_counters(|key, c| {
            add(key, Kind::Counter, Sample::Value(c.load(Ordering::Acquire) as f64));
        });
        self.registry.visit_gauges(|key, g| {
            add(key, Kind::Gauge, Sample::Value(f64::from_bits(g.load(Ordering::Acquire))));
        });
        self.registry.visit_histograms(|key, h| add(key, Kind::Histogram, Sample::Histogram(h.snapshot())));

        let descriptions = self.descriptions.read().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        for ((name, kind), mut series) in families {
            series.sort_by(|a, b| a.0.cmp(&b.0));
            if let Some(help) = descriptions.get(&name) {
                let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
            }
            let _ = writeln!(out, "# TYPE {name} {}", kind.type_name());
            for (labels, sample) in &series {
                write_series(&mut out, &name, labels, sample);
            }
        }
        out
    }

    fn describe(&self, key: KeyName, description: SharedString) {
        let name = sanitize_metric_name(key.as_str());
        self.descriptions.write().unwrap_or_else(PoisonError::into_inner).insert(name, description);
    }
}

impl Recorder for PrometheusRegistry {
    fn describe_counter(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }

    fn describe_gauge(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }

    fn describe_histogram(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }

    fn register_counter(&self, key: &Key, _metadata: &Metadata<'_>) -> Counter {
        self.registry.get_or_create_counter(key, |c| Counter::from_arc(Arc::clone(c)))
    }

    fn register_gauge(&self, key: &Key, _metadata: &Metadata<'_>) -> Gauge {
        self.registry.get_or_create_gauge(key, |g| Gauge::from_arc(Arc::clone(g)))
    }

    fn register_histogram(&self, key: &Key, _metadata: &Metadata<'_>) -> Histogram {
        self.registry.get_or_create_histogram(key, |h| Histogram::from_arc(Arc::clone(h)))
    }
}

/// The process-global registry, if [`PrometheusRegistry::global`] installed one.
pub fn installed() -> Option<&'static Arc<PrometheusRegistry>> {
    GLOBAL.get().and_then(Option::as_ref)
}

/// Forgets series through the global registry if one is installed (a no-op otherwise): see
/// [`PrometheusRegistry::forget`].
pub fn forget_series(name: &str, labels: &[(&str, &str)]) {
    if let Some(Some(registry)) = GLOBAL.get() {
        registry.forget(name, labels);
    }
}

// === rendering ===

/// A series' labels, sanitized keys with raw values, sorted by key.
type Labels = Vec<(String, String)>;

/// One series' value(s) at render time.
#[derive(Debug)]
enum Sample {
    Value(f64),
    Histogram(HistogramSnapshot),
}

fn sorted_labels(key: &Key) -> Labels {
    let mut labels: Labels =
        key.labels().map(|l| (sanitize_label_key(l.key()), l.value().to_owned())).collect();
    labels.sort();
    labels
}

fn write_series(out: &mut String, name: &str, labels: &Labels, sample: &Sample) {
    match sample {
        Sample::Value(v) => write_line(out, name, "", labels, None, *v),
        Sample::Histogram(h) => {
            let bounds = h.bounds.iter().copied().chain([f64::INFINITY]);
            for (le, count) in bounds.zip(&h.cumulative) {
                write_line(out, name, "_bucket", labels, Some(le), *count as f64);
            }
            write_line(out, name, "_sum", labels, None, h.sum);
            let count = h.cumulative.last().copied().unwrap_or(0);
            write_line(out, name, "_count", labels, None, count as f64);
        }
    }
}

/// `name{labels[,le="…"]} value`, braces omitted when there are no labels.
fn write_line(out: &mut String, name: &str, suffix: &str, labels: &Labels, le: Option<f64>, value: f64) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        for (i, (key, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(key);
            out.push_str("=\"");
            out.push_str(&escape_label_value(value));
            out.push('"');
        }
        if let Some(le) = le {
            if !labels.is_empty() {
                out.push(',');
            }
            out.push_str("le=\"");
            write_float(out, le);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    write_float(out, value);
    out.push('\n');
}

/// Formats like client_golang's `writeFloat`: `strconv.FormatFloat(v, 'g', -1, 64)` (shortest
/// round-trip digits, exponent form when the exponent is < -4 or >= 6, e.g. `1e+06`), with
/// `+Inf`, `-Inf`, `NaN` and `0` for negative zero.
fn write_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v == 0.0 {
        out.push('0');
    } else {
        // Rust's `{:e}` gives the same shortest digits as Go, as `d[.ddd]e<exp>`.
        let sci = format!("{v:e}");
        let parsed = sci.split_once('e').and_then(|(m, e)| Some((m, e.parse::<i32>().ok()?)));
        match parsed {
            Some((mantissa, exp)) if !(-4..6).contains(&exp) => {
                let sign = if exp < 0 { '-' } else { '+' };
                let _ = write!(out, "{mantissa}e{sign}{:02}", exp.unsigned_abs());
            }
            _ => {
                let _ = write!(out, "{v}");
            }
        }
    }
}

/// Label values escape backslash, double quote and line feed (text format 0.0.4).
fn escape_label_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// HELP text escapes backslash and line feed only (text format 0.0.4).
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Replaces characters outside `[a-zA-Z_:][a-zA-Z0-9_:]*` with `_`.
fn sanitize_metric_name(name: &str) -> String {
    sanitize(name, |c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Replaces characters outside `[a-zA-Z_][a-zA-Z0-9_]*` with `_`.
fn sanitize_label_key(key: &str) -> String {
    sanitize(key, |c| c.is_ascii_alphanumeric() || c == '_')
}

fn sanitize(s: &str, valid: impl Fn(char) -> bool) -> String {
    let sanitized: String = s
        .chars()
        .enumerate()
        .map(|(i, c)| if valid(c) && !(i == 0 && c.is_ascii_digit()) { c } else { '_' })
        .collect();
    if sanitized.is_empty() { "_".to_owned() } else { sanitized }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forget_exact_forgets_the_one_series_of_its_kind() {
        let registry = PrometheusRegistry::new();
        metrics::with_local_recorder(&registry, || {
            metrics::counter!("probelet_test_total", "pod" => "a").increment(1);
            metrics::counter!("probelet_test_total", "pod" => "b").increment(1);
            metrics::histogram!("probelet_test_total", "pod" => "a").record(1.0);
        });
        let epoch = forget_epoch();
        assert!(registry.forget_exact(SeriesKind::Counter, "probelet_test_total", &[("pod", "a")]));
        assert!(forget_epoch() > epoch, "a forgotten series moves the epoch");
        assert!(!registry.forget_exact(SeriesKind::Counter, "probelet_test_total", &[("pod", "a")]));
        assert!(!registry.forget_exact(SeriesKind::Gauge, "probelet_test_total", &[("pod", "b")]));
        let text = registry.render();
        assert!(!text.contains("probelet_test_total{pod=\"a\"} 1"), "{text}");
        assert!(text.contains("probelet_test_total{pod=\"b\"} 1"), "another series stays: {text}");
        assert!(text.contains("probelet_test_total_count{pod=\"a\"} 1"), "the histogram stays: {text}");
    }

    fn float(v: f64) -> String {
        let mut s = String::new();
        write_float(&mut s, v);
        s
    }

    #[test]
    fn floats_format_like_go() {
        let cases = [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (2.5, "2.5"),
            (0.005, "0.005"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (0.000012345, "1.2345e-05"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (-2.5e7, "-2.5e+07"),
            (1e21, "1e+21"),
            (1e100, "1e+100"),
            (1e-300, "1e-300"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ];
        for (v, want) in cases {
            assert_eq!(float(v), want, "case {v:?}");
        }
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        assert_eq!(escape_label_value(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label_value("x\ny"), r"x\ny");
        assert_eq!(escape_label_value(r#"\""#), r#"\\\""#);
        assert_eq!(escape_help("a \"q\" \\ b\nc"), "a \"q\" \\\\ b\\nc");
    }

    #[test]
    fn names_are_sanitized() {
        assert_eq!(sanitize_metric_name("a.b-c:d_1"), "a_b_c:d_1");
        assert_eq!(sanitize_metric_name("1abc"), "_abc");
        assert_eq!(sanitize_label_key("a:b"), "a_b");
        assert_eq!(sanitize_label_key(""), "_");
    }

    #[test]
    fn histogram_buckets_use_le_semantics() {
        let h = FixedHistogram::new(Arc::from([1.0, 2.0].as_slice()));
        for v in [0.5, 1.0, 1.5, 2.0, 3.0, f64::NAN] {
            h.record(v);
        }
        h.record_many(-1.0, 2);
        h.record_many(5.0, 0);
        let snap = h.snapshot();
        // <=1: 0.5, 1.0, -1 ×2; <=2: +1.5, 2.0; +Inf: +3.0, NaN.
        assert_eq!(snap.cumulative, vec![4, 6, 8]);
        assert!(snap.sum.is_nan(), "NaN observations poison the sum as in client_golang");
    }

    #[test]
    fn a_histogram_with_more_buckets_than_kept_inline_counts_each_in_its_own() {
        // 20 bounds 1..=20: buckets 0..=11 inline, 12..=20 (the last is +Inf) in `more`.
        let bounds: Vec<f64> = (1..=20).map(f64::from).collect();
        let h = FixedHistogram::new(Arc::from(bounds.as_slice()));
        for v in 1..=21 {
            h.record_many(f64::from(v), usize::try_from(v).unwrap());
        }
        let snap = h.snapshot();
        let want: Vec<u64> =
            (1..=21u64).scan(0, |total, v| Some(*total + v).inspect(|t| *total = *t)).collect();
        assert_eq!(snap.cumulative, want, "each value in its own bucket, none lost or doubled");
        assert_eq!(h.buckets().count(), 21);
        assert!(h.bucket(21).is_none());
        // Fewer bounds than the inline room: the spare slots are not buckets.
        let small = FixedHistogram::new(Arc::from([1.0].as_slice()));
        small.record(7.0);
        assert_eq!(small.snapshot().cumulative, vec![0, 1]);
    }

    #[test]
    fn histogram_sum_accumulates() {
        let h = FixedHistogram::new(Arc::from(DEFAULT_BUCKETS.as_slice()));
        h.record(0.25);
        h.record_many(0.5, 3);
        let snap = h.snapshot();
        assert_eq!(snap.sum, 1.75);
        assert_eq!(snap.cumulative.last(), Some(&4));
        assert_eq!(snap.cumulative.len(), DEFAULT_BUCKETS.len() + 1);
    }

    #[test]
    fn buckets_are_validated() {
        let ok = |b: &[f64]| validate_buckets("h", b).map(|b| b.to_vec());
        assert_eq!(ok(&[1.0, 2.0]), Ok(vec![1.0, 2.0]));
        assert_eq!(ok(&[1.0, f64::INFINITY]), Ok(vec![1.0]));
        assert_eq!(ok(&[]), Ok(vec![]));
        for (case, bad) in [
            ("not increasing", vec![2.0, 1.0]),
            ("duplicate", vec![1.0, 1.0]),
            ("nan", vec![f64::NAN]),
            ("inf in the middle", vec![f64::INFINITY, f64::INFINITY]),
        ] {
            assert!(
                matches!(validate_buckets("h", &bad), Err(MetricsError::InvalidBuckets { .. })),
                "case {case}"
            );
        }
    }

    #[test]
    fn render_with_no_series_is_empty_even_when_described() {
        let registry = PrometheusRegistry::new();
        describe_into(&registry);
        assert_eq!(registry.render(), "");
    }

    #[test]
    fn series_labels_render_sorted_by_name() {
        let registry = PrometheusRegistry::new();
        metrics::with_local_recorder(&registry, || {
            metrics::counter!("c", "z" => "1", "a" => "2").increment(1);
        });
        assert_eq!(registry.render(), "# TYPE c counter\nc{a=\"2\",z=\"1\"} 1\n");
    }
}
