//! The status page at `/`: the node's pods, their conditions and containers, each probe's last
//! results as a strip, and the recent events, as one server-rendered HTML document with inline
//! CSS and a few lines of inline script that refresh it. The data is the same as `/pods`,
//! `/pods/{namespace}/{name}/probes` and `/events`; docs/status-page.md describes what the page
//! shows and why it is built this way. (No upstream counterpart: the kubelet has no page; Envoy's
//! and Consul's admin pages are the models.)
//!
//! Everything here is a pure function of the data. Every string that comes from a manifest, a
//! probed endpoint or an event goes through [`escape`] (in text and in attribute values alike);
//! markup is only ever a `&'static str`, so a user's string cannot become markup by mistake.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{Container, ContainerState, ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::host::events::RecentEvent;
use crate::host::history::{ProbeRun, ProbeRuns, RESULTS_KEPT};

/// How often the page fetches itself again, in milliseconds.
pub const REFRESH_MILLIS: u32 = 2000;
/// Events shown, newest first; `/events` has them all.
pub const EVENTS_SHOWN: usize = 50;

/// One pod with the runs of its probes.
#[derive(Debug, Clone)]
pub struct PodPage {
    /// The pod with its current status in place.
    pub pod: Pod,
    /// Its probes' runs, as `/pods/{namespace}/{name}/probes` lists them.
    pub probes: Vec<ProbeRuns>,
}

/// What one rendering of the page shows.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// The pods, in the order to show them.
    pub pods: &'a [PodPage],
    /// The kept events, oldest first (as the event log keeps them).
    pub events: &'a [RecentEvent],
    /// When the page is rendered: ages are counted from it.
    pub now: Timestamp,
    /// The Content-Security-Policy nonce that lets the page's own script and style run.
    pub nonce: &'a str,
}

/// A fresh nonce for one response: 128 random bits in hex.
pub fn nonce() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The Content-Security-Policy of a page rendered with `nonce`: only its own inline style and
/// script, fetches to the same origin, no frames, forms or plugins. An injected `<script>` or
/// `<style>` would not run even if something escaped the escaping.
pub fn content_security_policy(nonce: &str) -> String {
    format!(
        "default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; connect-src 'self'; \
         img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

/// The page as an HTTP response: HTML, its Content-Security-Policy, and headers that keep the
/// private data it shows out of caches and referrers.
pub fn response(page: &Page<'_>) -> axum::response::Response {
    use axum::http::header;
    use axum::response::IntoResponse as _;
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_owned()),
            (header::CONTENT_SECURITY_POLICY, content_security_policy(page.nonce)),
            (header::CACHE_CONTROL, "no-store".to_owned()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (header::REFERRER_POLICY, "no-referrer".to_owned()),
        ],
        render(page),
    )
        .into_response()
}

/// HTML text with its content escaped: `<`, `>`, `&`, `"` and `'`, so that the result is safe
/// both as element text and inside a quoted attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A document being written: markup only from literals, everything else escaped.
#[derive(Default)]
struct Html(String);

impl Html {
    /// Markup written by this module.
    fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.0.push_str(markup);
        self
    }

    /// Text from the data, escaped.
    fn text(&mut self, text: &str) -> &mut Self {
        self.0.push_str(&escape(text));
        self
    }

    /// ` name="value"`, the value escaped.
    fn attr(&mut self, name: &'static str, value: &str) -> &mut Self {
        let _ = write!(self.0, " {name}=\"{}\"", escape(value));
        self
    }
}

/// The whole page.
pub fn render(page: &Page<'_>) -> String {
    let mut h = Html::default();
    h.raw("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
        .raw("<title>probelet</title>")
        // Without script the page still refreshes, less smoothly.
        .raw("<noscript><meta http-equiv=\"refresh\" content=\"5\"></noscript>")
        .raw("<style")
        .attr("nonce", page.nonce)
        .raw(">")
        .raw(STYLE)
        .raw("</style></head><body><header><h1>probelet</h1><nav>")
        .raw("<a href=\"pods\">/pods</a> <a href=\"events\">/events</a> <a href=\"metrics\">/metrics</a>")
        .raw("</nav></header>")
        .raw("<p id=\"stale\">The agent does not answer: showing the last page it sent.</p>");
    main(&mut h, page);
    h.raw("<script").attr("nonce", page.nonce).raw(">");
    h.0.push_str(&refresh_script());
    h.raw("</script></body></html>\n");
    h.0
}

/// The part the script swaps in on each refresh.
fn main(h: &mut Html, page: &Page<'_>) {
    let ready = page.pods.iter().filter(|p| pod_ready(&p.pod)).count();
    let warnings = page.events.iter().filter(|e| e.type_ == "Warning").count();
    h.raw("<main id=\"status\"><p class=\"summary\">");
    h.text(&format!(
        "{} pod{} · {ready} ready · {warnings} warning event{} · {}",
        page.pods.len(),
        plural(page.pods.len()),
        plural(warnings),
        crate::host::history::format_time(page.now)
    ));
    // Pods on the left, events beside them on a wide screen, below them on a narrow one.
    h.raw(" <span class=\"refreshing\">· refreshes itself every ")
        .text(&format!("{} s", REFRESH_MILLIS / 1000))
        .raw("</span></p><div class=\"columns\"><div class=\"pods\">");
    if page.pods.is_empty() {
        h.raw("<p class=\"empty\">No pods.</p>");
    }
    for pod in page.pods {
        pod_section(h, pod, page.now);
    }
    h.raw("</div>");
    events_section(h, page.events, page.now);
    h.raw("</div></main>");
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Whether the pod's Ready condition is `True`.
pub fn pod_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_section(h: &mut Html, page: &PodPage, now: Timestamp) {
    let pod = &page.pod;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let ready = pod_ready(pod);
    let status = pod.status.as_ref();
    h.raw("<section class=\"pod ")
        .raw(if ready { "ready" } else { "not-ready" })
        .raw("\"")
        .attr("data-pod", &format!("{namespace}/{name}"))
        .raw("><div class=\"pod-head\"><h2>")
        .raw(if ready {
            "<span class=\"marker ready\">Ready</span>"
        } else {
            "<span class=\"marker not-ready\">Not ready</span>"
        })
        .raw(" <span class=\"name\">")
        .text(namespace)
        .raw("/")
        .text(name)
        .raw("</span> <span class=\"phase\">")
        .text(status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending"))
        .raw("</span>");
    // Why the pod is in its phase, when the status says (a pod its active deadline failed).
    if let Some(reason) = status.and_then(|s| s.reason.as_deref()).filter(|r| !r.is_empty()) {
        h.raw(" <span class=\"reason\">").text(reason).raw("</span>");
    }
    if let Some(message) = status.and_then(|s| s.message.as_deref()).filter(|m| !m.is_empty()) {
        h.raw(" <span class=\"message\">").text(message).raw("</span>");
    }
    h.raw("</h2>");

    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    if !conditions.is_empty() {
        h.raw("<ul class=\"conditions\">");
        for c in conditions {
            h.raw("<li class=\"condition ")
                .raw(match c.status.as_str() {
                    "True" => "true",
                    "False" => "false",
                    _ => "unknown",
                })
                .raw("\"");
            if let Some(t) = &c.last_transition_time {
                h.attr("title", &format!("since {}", crate::host::history::format_time(t.0)));
            }
            h.raw(">").text(&c.type_).raw("=").text(&c.status);
            if let Some(reason) = c.reason.as_deref().filter(|r| !r.is_empty()) {
                h.raw(" <span class=\"reason\">").text(reason).raw("</span>");
            }
            if let Some(message) = c.message.as_deref().filter(|m| !m.is_empty()) {
                h.raw(" <span class=\"message\">").text(message).raw("</span>");
            }
            h.raw("</li>");
        }
        h.raw("</ul>");
    }
    h.raw("</div>");

    h.raw("<table class=\"containers\"><thead><tr><th>container</th><th>state</th><th>ready</th>")
        .raw("<th>started</th><th>restarts</th><th>probes (oldest → newest)</th></tr></thead><tbody>");
    let spec = pod.spec.as_ref();
    let init = spec.and_then(|s| s.init_containers.as_deref()).unwrap_or_default();
    let init_statuses = status.and_then(|s| s.init_container_statuses.as_deref()).unwrap_or_default();
    for container in init {
        container_row(h, container, init_statuses, &page.probes, true, now);
    }
    let statuses = status.and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    for container in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
        container_row(h, container, statuses, &page.probes, false, now);
    }
    h.raw("</tbody></table></section>");
}

fn container_row(
    h: &mut Html,
    container: &Container,
    statuses: &[ContainerStatus],
    probes: &[ProbeRuns],
    init: bool,
    now: Timestamp,
) {
    let status = statuses.iter().find(|s| s.name == container.name);
    h.raw("<tr class=\"container\"").attr("data-container", &container.name).raw("><td class=\"cname\">");
    h.text(&container.name);
    if init {
        h.raw(" <span class=\"tag\">init</span>");
    }
    h.raw("</td><td class=\"state\">");
    match status.and_then(|s| s.state.as_ref()) {
        Some(state) => container_state(h, state, now),
        None => {
            h.raw("<span class=\"state-none\">no status yet</span>");
        }
    }
    h.raw("</td>");
    match status.map(|s| s.ready) {
        Some(true) => h.raw("<td class=\"yes\">✓ ready</td>"),
        Some(false) => h.raw("<td class=\"no\">✗ not ready</td>"),
        None => h.raw("<td>–</td>"),
    };
    match status.and_then(|s| s.started) {
        Some(true) => h.raw("<td class=\"yes\">✓ started</td>"),
        Some(false) => h.raw("<td class=\"no\">✗ not started</td>"),
        None => h.raw("<td>–</td>"),
    };
    h.raw("<td class=\"restarts\">").text(&status.map(|s| s.restart_count).unwrap_or(0).to_string());
    if let Some(last) = status.and_then(|s| s.last_state.as_ref()).and_then(|s| s.terminated.as_ref()) {
        h.raw(" <span class=\"last\">last: ")
            .text(last.reason.as_deref().unwrap_or("Terminated"))
            .text(&format!(" (exit {})", last.exit_code));
        if let Some(finished) = &last.finished_at {
            h.text(&format!(" {} ago", age(now, finished.0)));
        }
        h.raw("</span>");
    }
    h.raw("</td><td class=\"probes\">");
    for runs in probes.iter().filter(|p| p.container == container.name) {
        probe_strip(h, runs);
    }
    h.raw("</td></tr>");
}

fn container_state(h: &mut Html, state: &ContainerState, now: Timestamp) {
    if let Some(running) = &state.running {
        h.raw("<span class=\"state-running\"");
        if let Some(t) = &running.started_at {
            h.attr("title", &format!("started {}", crate::host::history::format_time(t.0)));
        }
        h.raw(">Running");
        if let Some(t) = &running.started_at {
            h.text(&format!(" for {}", age(now, t.0)));
        }
        h.raw("</span>");
    } else if let Some(waiting) = &state.waiting {
        h.raw("<span class=\"state-waiting\">Waiting");
        if let Some(reason) = waiting.reason.as_deref().filter(|r| !r.is_empty()) {
            h.raw(": ").text(reason);
        }
        h.raw("</span>");
        if let Some(message) = waiting.message.as_deref().filter(|m| !m.is_empty()) {
            h.raw(" <span class=\"message\"").attr("title", message).raw(">").text(message).raw("</span>");
        }
    } else if let Some(terminated) = &state.terminated {
        h.raw("<span class=\"state-terminated\">Terminated: ")
            .text(terminated.reason.as_deref().unwrap_or("Unknown"))
            .text(&format!(" (exit {})", terminated.exit_code))
            .raw("</span>");
        if let Some(message) = terminated.message.as_deref().filter(|m| !m.is_empty()) {
            h.raw(" <span class=\"message\"").attr("title", message).raw(">").text(message).raw("</span>");
        }
    } else {
        h.raw("<span class=\"state-none\">no state</span>");
    }
}

/// One probe: its kind, [`RESULTS_KEPT`] cells (empty ones first until it has run that often),
/// then its latest result in words. Each cell's `title` tells the run's time, result, duration
/// and output.
fn probe_strip(h: &mut Html, runs: &ProbeRuns) {
    h.raw("<div class=\"probe\"").attr("data-probe", &runs.probe_type).raw(">");
    h.raw("<span class=\"kind\">").text(&runs.probe_type).raw("</span><span class=\"strip\">");
    let shown = &runs.results[runs.results.len().saturating_sub(RESULTS_KEPT)..];
    for _ in shown.len()..RESULTS_KEPT {
        h.raw("<span class=\"run none\" title=\"not run yet\"></span>");
    }
    for run in shown {
        h.raw("<span class=\"run ").raw(result_class(&run.result)).raw("\"").attr("title", &run_title(run));
        h.raw("></span>");
    }
    h.raw("</span>");
    if let Some(last) = shown.last() {
        h.raw(" <span class=\"latest ").raw(result_class(&last.result)).raw("\">").text(&last.result);
        h.raw("</span>");
    }
    h.raw("</div>");
}

/// The CSS class of a probe result as the history records it.
pub fn result_class(result: &str) -> &'static str {
    match result {
        "Success" => "success",
        "Failure" => "failure",
        "Error" => "error",
        _ => "unknown",
    }
}

/// What hovering a strip cell tells: `TIME · RESULT · DURATION`, then the output if any.
pub fn run_title(run: &ProbeRun) -> String {
    let mut title = format!("{} · {} · {}", run.time, run.result, duration(run.duration_seconds));
    if run.waited_seconds > 0.0 {
        let _ = write!(title, " after {} waiting for a probe slot", duration(run.waited_seconds));
    }
    if !run.output.is_empty() {
        title.push('\n');
        title.push_str(run.output.trim_end());
    }
    title
}

/// A probe's duration: milliseconds below a second, seconds above.
pub fn duration(seconds: f64) -> String {
    if seconds < 1.0 { format!("{:.1} ms", seconds * 1000.0) } else { format!("{seconds:.2} s") }
}

/// A time span as `kubectl get` shows ages: `42s`, `3m12s`, `2h5m`, `4d3h`.
pub fn age(now: Timestamp, then: Timestamp) -> String {
    let secs = now.duration_since(then).as_secs().max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{}s", secs / 60, secs % 60),
        3600..86400 => format!("{}h{}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{}h", secs / 86400, secs % 86400 / 3600),
    }
}

fn events_section(h: &mut Html, events: &[RecentEvent], now: Timestamp) {
    h.raw("<section class=\"events\"><h2>Recent events</h2>");
    if events.is_empty() {
        h.raw("<p class=\"empty\">No events.</p></section>");
        return;
    }
    if events.len() > EVENTS_SHOWN {
        h.raw("<p class=\"note\">")
            .text(&format!("The newest {EVENTS_SHOWN} of {}; ", events.len()))
            .raw("<a href=\"events\">/events</a> has them all.</p>");
    }
    h.raw("<ul class=\"event-list\">");
    for event in events.iter().rev().take(EVENTS_SHOWN) {
        h.raw("<li class=\"event ")
            .raw(if event.type_ == "Warning" { "warning" } else { "normal" })
            .raw("\"><div class=\"meta\"><span class=\"when\"")
            .attr("title", &format!("first {} · last {}", event.first_timestamp, event.last_timestamp))
            .raw(">");
        match event.last_timestamp.parse::<Timestamp>() {
            Ok(t) => h.text(&format!("{} ago", age(now, t))),
            Err(_) => h.text(&event.last_timestamp),
        };
        let object = &event.involved_object;
        h.raw("</span> <span class=\"type\">")
            .text(&event.type_)
            .raw("</span> <span class=\"reason\">")
            .text(&event.reason)
            .raw("</span> <span class=\"object\">")
            .text(&format!(
                "{}/{}",
                object.namespace.as_deref().unwrap_or_default(),
                object.name.as_deref().unwrap_or_default()
            ));
        if let Some(field) = object.field_path.as_deref().filter(|f| !f.is_empty()) {
            h.raw(" <span class=\"field\">").text(field).raw("</span>");
        }
        h.raw("</span>");
        if event.count > 1 {
            h.raw(" <span class=\"count\">").text(&format!("×{}", event.count)).raw("</span>");
        }
        h.raw("</div><div class=\"message\">").text(&event.message).raw("</div></li>");
    }
    h.raw("</ul></section>");
}

/// Marks the document as refreshing (the summary then says so), fetches the page again every
/// [`REFRESH_MILLIS`] and swaps its `<main>` in, which keeps the scroll position; not while the pointer rests on a strip (its tooltip would vanish). A failed
/// fetch shows the stale banner and keeps the last page.
fn refresh_script() -> String {
    format!(
        "document.documentElement.dataset.refresh = '{REFRESH_MILLIS}';\
setInterval(async () => {{\
if (document.querySelector('.strip:hover')) return;\
try {{\
const r = await fetch(location.href, {{cache: 'no-store'}});\
if (!r.ok) throw new Error(r.status);\
const next = new DOMParser().parseFromString(await r.text(), 'text/html').getElementById('status');\
if (!next) throw new Error('no status');\
document.getElementById('status').replaceWith(next);\
document.body.classList.remove('stale');\
}} catch (e) {{ document.body.classList.add('stale'); }}\
}}, {REFRESH_MILLIS});"
    )
}

const STYLE: &str = "\
:root{--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--muted:#656d76;--line:#d0d7de;--bg:#f6f8fa}\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1f2328;background:#fff}\
header{display:flex;align-items:baseline;gap:1.5em;padding:.6em 1.2em;background:#24292f;color:#fff}\
header h1{font-size:1.2em;margin:0}header a{color:#9ecbff;margin-right:.8em}\
main{padding:.4em 1.2em 2em}\
.summary{color:var(--muted);margin:.4em 0 .8em}\
.refreshing{display:none}html[data-refresh] .refreshing{display:inline}\
#stale{display:none;margin:0;padding:.4em 1.2em;background:#fff8c5;color:var(--warn)}\
body.stale #stale{display:block}\
section.pod{border:1px solid var(--line);border-left:5px solid var(--bad);border-radius:6px;margin:0 0 .8em;padding:.4em .8em;overflow-x:auto}\
section.pod.ready{border-left-color:var(--ok)}\
h2{font-size:1.05em;margin:.2em 0 .4em}\
.marker{display:inline-block;padding:0 .5em;border-radius:1em;color:#fff;font-size:.85em}\
.marker.ready{background:var(--ok)}.marker.not-ready{background:var(--bad)}\
.phase{color:var(--muted);font-weight:normal}\
ul.conditions{list-style:none;padding:0;margin:0 0 .5em;display:flex;flex-wrap:wrap;gap:.4em}\
li.condition{border:1px solid var(--line);border-radius:4px;padding:0 .4em;background:var(--bg)}\
li.condition.true{color:var(--ok)}li.condition.false{color:var(--bad)}li.condition.unknown{color:var(--warn)}\
.reason{font-weight:600}.message{color:var(--muted)}\
table{border-collapse:collapse;width:100%}\
th{text-align:left;font-weight:600;color:var(--muted);border-bottom:1px solid var(--line);padding:.2em .5em}\
td{border-bottom:1px solid var(--bg);padding:.25em .5em;vertical-align:top}\
td.yes{color:var(--ok)}td.no{color:var(--bad)}\
td.state>span:first-child{white-space:nowrap}\
td.state .message{display:block;max-width:14em;font-size:.85em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}\
.tag{font-size:.8em;color:var(--muted);border:1px solid var(--line);border-radius:3px;padding:0 .3em}\
.state-running{color:var(--ok)}.state-waiting{color:var(--warn)}.state-terminated{color:var(--bad)}\
.state-none{color:var(--muted)}.last{display:block;color:var(--muted);font-size:.85em}\
.probe{display:flex;align-items:center;gap:.5em;white-space:nowrap}\
.probe .kind{min-width:5em;color:var(--muted)}\
.strip{display:inline-flex;gap:2px}\
.run{display:inline-block;width:12px;height:16px;border-radius:2px;background:#eaeef2}\
.run.success{background:var(--ok)}.run.failure{background:var(--bad)}\
.run.error{background:#8250df}.run.unknown{background:#bf8700}\
.run:hover{outline:2px solid #1f2328}\
.latest.success{color:var(--ok)}.latest.failure{color:var(--bad)}.latest.error{color:#8250df}\
.latest.unknown{color:var(--warn)}\
.columns{display:grid;grid-template-columns:minmax(0,1fr);gap:1.2em}\
@media (min-width:1100px){.columns{grid-template-columns:minmax(0,1fr) 360px}}\
.pod-head{display:flex;flex-wrap:wrap;align-items:center;gap:.3em .8em;margin-bottom:.3em}\
.pod-head h2,.pod-head ul.conditions{margin:0}\
ul.event-list{list-style:none;padding:0;margin:0}\
li.event{border-left:3px solid var(--line);padding:.2em .6em;margin-bottom:.4em}\
li.event.warning{border-left-color:var(--bad)}\
.event .meta{font-size:.85em;color:var(--muted)}\
.event.warning .type{color:var(--bad);font-weight:600}\
.event .reason{color:#1f2328}.event .message{overflow-wrap:anywhere}\
.count{font-weight:600}\
.field{color:var(--muted);font-size:.9em}.empty,.note{color:var(--muted)}\
";

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ObjectReference,
        PodCondition, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    const HOSTILE: &str = "<script>alert('x')</script><img src=x onerror=\"alert(1)\">&amp;";

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn run(result: &str, output: &str) -> ProbeRun {
        ProbeRun {
            time: "2027-01-15T08:00:00Z".into(),
            result: result.into(),
            duration_seconds: 0.0042,
            waited_seconds: 0.0,
            output: output.into(),
        }
    }

    fn pod(name: &str, ready: bool, state: ContainerState) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container { name: "app".into(), ..Default::default() }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    reason: (!ready).then(|| "ContainersNotReady".into()),
                    message: (!ready).then(|| "containers with unready status: [app]".into()),
                    last_transition_time: Some(Time(at(0))),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".into(),
                    ready,
                    started: Some(true),
                    restart_count: 2,
                    state: Some(state),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn running(secs: i64) -> ContainerState {
        ContainerState {
            running: Some(ContainerStateRunning { started_at: Some(Time(at(secs))) }),
            ..Default::default()
        }
    }

    fn render_one(pods: &[PodPage], events: &[RecentEvent]) -> String {
        render(&Page { pods, events, now: at(200), nonce: "abc" })
    }

    /// The `<section>` of one pod.
    fn section<'a>(html: &'a str, pod: &str) -> &'a str {
        let start = html.find(&format!("data-pod=\"{pod}\"")).expect("the pod's section");
        let end = html[start..].find("</section>").unwrap() + start;
        &html[start..end]
    }

    #[test]
    fn escapes_every_special_character() {
        assert_eq!(
            escape(r#"<a href="x" title='y'>&</a>"#),
            "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;"
        );
        assert_eq!(escape("plain text · ✓"), "plain text · ✓");
    }

    #[test]
    fn a_ready_pod_and_a_failing_probe() {
        let pods = [
            PodPage {
                pod: pod("web", true, running(80)),
                probes: vec![ProbeRuns {
                    container: "app".into(),
                    probe_type: "Readiness".into(),
                    results: vec![run("Success", ""); 3],
                }],
            },
            PodPage {
                pod: pod("broken", false, running(0)),
                probes: vec![ProbeRuns {
                    container: "app".into(),
                    probe_type: "Readiness".into(),
                    results: vec![
                        run("Success", ""),
                        run("Failure", "HTTP probe failed with statuscode: 503"),
                    ],
                }],
            },
        ];
        let html = render_one(&pods, &[]);
        assert!(html.contains("1 ready"), "{html}");

        let web = section(&html, "default/web");
        assert!(web.starts_with(
            "data-pod=\"default/web\"><div class=\"pod-head\"><h2><span class=\"marker ready\">Ready</span>"
        ));
        assert!(web.contains("Running for 2m0s"), "{web}");
        assert!(web.contains("<td class=\"yes\">✓ ready</td>"));
        assert!(web.contains("<td class=\"restarts\">2"));
        assert_eq!(web.matches("class=\"run none\"").count(), 7, "3 runs, 7 empty cells: {web}");
        assert_eq!(web.matches("class=\"run success\"").count(), 3);

        let broken = section(&html, "default/broken");
        assert!(broken.contains("<span class=\"marker not-ready\">Not ready</span>"), "{broken}");
        assert!(broken.contains("Ready=False <span class=\"reason\">ContainersNotReady</span>"));
        assert!(broken.contains(
            "<span class=\"run failure\" title=\"2027-01-15T08:00:00Z · Failure · 4.2 ms\nHTTP probe failed with statuscode: 503\"></span></span> <span class=\"latest failure\">Failure</span>"
        ), "{broken}");
    }

    /// A pod's own reason and message (its active deadline failed it) follow its phase.
    #[test]
    fn a_failed_pod_shows_why_beside_its_phase() {
        let mut failed = pod("job", false, running(0));
        let status = failed.status.as_mut().unwrap();
        status.phase = Some("Failed".into());
        status.reason = Some("DeadlineExceeded".into());
        status.message = Some("Pod was active on the node longer than the specified deadline".into());
        let html = render_one(
            &[
                PodPage { pod: failed, probes: vec![] },
                PodPage { pod: pod("web", true, running(0)), probes: vec![] },
            ],
            &[],
        );
        assert!(
            section(&html, "default/job").contains(
                "<span class=\"phase\">Failed</span> <span class=\"reason\">DeadlineExceeded</span> \
                 <span class=\"message\">Pod was active on the node longer than the specified deadline</span></h2>"
            ),
            "{html}"
        );
        assert!(
            section(&html, "default/web").contains("<span class=\"phase\">Running</span></h2>"),
            "no reason, nothing more"
        );
    }

    #[test]
    fn a_run_that_waited_for_a_probe_slot_says_so() {
        let mut waited = run("Success", "");
        waited.waited_seconds = 0.25;
        assert_eq!(
            run_title(&waited),
            "2027-01-15T08:00:00Z · Success · 4.2 ms after 250.0 ms waiting for a probe slot"
        );
        assert_eq!(run_title(&run("Success", "")), "2027-01-15T08:00:00Z · Success · 4.2 ms");
    }

    #[test]
    fn a_strip_shows_the_last_ten_runs() {
        let mut results: Vec<ProbeRun> = (0..12).map(|_| run("Success", "")).collect();
        results[0] = run("Failure", "");
        let pods = [PodPage {
            pod: pod("p", true, running(0)),
            probes: vec![ProbeRuns { container: "app".into(), probe_type: "Liveness".into(), results }],
        }];
        let html = render_one(&pods, &[]);
        assert_eq!(html.matches("class=\"run ").count(), RESULTS_KEPT);
        assert!(!html.contains("run failure"), "the 12th-newest run is not shown");
    }

    #[test]
    fn hostile_strings_are_escaped_everywhere() {
        let mut p = pod(
            HOSTILE,
            false,
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(HOSTILE.into()),
                    message: Some(HOSTILE.into()),
                }),
                ..Default::default()
            },
        );
        p.metadata.namespace = Some(HOSTILE.into());
        let status = p.status.as_mut().unwrap();
        status.phase = Some(HOSTILE.into());
        status.reason = Some(HOSTILE.into());
        status.message = Some(HOSTILE.into());
        let condition = &mut status.conditions.as_mut().unwrap()[0];
        condition.type_ = HOSTILE.into();
        condition.reason = Some(HOSTILE.into());
        condition.message = Some(HOSTILE.into());
        let cs = &mut status.container_statuses.as_mut().unwrap()[0];
        cs.name = HOSTILE.into();
        cs.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                reason: Some(HOSTILE.into()),
                exit_code: 1,
                ..Default::default()
            }),
            ..Default::default()
        });
        p.spec.as_mut().unwrap().containers[0].name = HOSTILE.into();
        let pods = [PodPage {
            pod: p,
            probes: vec![ProbeRuns {
                container: HOSTILE.into(),
                probe_type: HOSTILE.into(),
                results: vec![run(HOSTILE, HOSTILE)],
            }],
        }];
        let events = [RecentEvent {
            involved_object: ObjectReference {
                name: Some(HOSTILE.into()),
                namespace: Some(HOSTILE.into()),
                field_path: Some(HOSTILE.into()),
                ..Default::default()
            },
            type_: HOSTILE.into(),
            reason: HOSTILE.into(),
            message: HOSTILE.into(),
            count: 1,
            first_timestamp: HOSTILE.into(),
            last_timestamp: HOSTILE.into(),
            ..Default::default()
        }];
        let html =
            render(&Page { pods: &pods, events: &events, now: at(0), nonce: "n\"><script>x</script>" });
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<script>x"), "{html}");
        assert_eq!(html.matches("<script").count(), 1, "only the page's own script");
        // Every occurrence is the escaped form: the hostile string was rendered many times over.
        let escaped = escape(HOSTILE);
        assert!(html.matches(escaped.as_str()).count() >= 15, "{html}");
        assert!(html.contains("&amp;amp;"), "an entity in the data stays text");
    }

    #[test]
    fn events_newest_first_and_bounded() {
        let event = |i: usize| RecentEvent {
            involved_object: ObjectReference {
                name: Some("web".into()),
                namespace: Some("default".into()),
                field_path: Some("spec.containers{app}".into()),
                ..Default::default()
            },
            type_: if i.is_multiple_of(2) { "Warning" } else { "Normal" }.into(),
            reason: "Unhealthy".into(),
            message: format!("message {i}"),
            count: 3,
            first_timestamp: "2027-01-15T07:59:00Z".into(),
            last_timestamp: crate::host::history::format_time(at(190)),
            ..Default::default()
        };
        let events: Vec<RecentEvent> = (0..60).map(event).collect();
        let html = render_one(&[], &events);
        assert!(html.contains("No pods."));
        assert!(html.contains("The newest 50 of 60"));
        assert_eq!(html.matches("<li class=\"event ").count(), EVENTS_SHOWN);
        let newest = html.find("message 59").unwrap();
        assert!(newest < html.find("message 58").unwrap(), "newest first");
        assert!(!html.contains("message 9<"), "the oldest ten are left out");
        assert!(
            html.contains(
                "<li class=\"event warning\"><div class=\"meta\"><span class=\"when\" title=\"first 2027-01-15T07:59:00Z · last 2027-01-15T08:03:10Z\">10s ago</span> <span class=\"type\">Warning</span> <span class=\"reason\">Unhealthy</span> <span class=\"object\">default/web <span class=\"field\">spec.containers{app}</span></span> <span class=\"count\">×3</span></div><div class=\"message\">message 58</div></li>"
            ),
            "{html}"
        );
        assert!(html.contains("30 warning events"));
    }

    #[test]
    fn the_page_refreshes_itself_and_runs_only_its_own_script() {
        let html = render_one(&[], &[]);
        assert!(html.contains(
            "<script nonce=\"abc\">document.documentElement.dataset.refresh = '2000';setInterval("
        ));
        assert!(html.contains("<style nonce=\"abc\">"));
        assert!(html.contains("<noscript><meta http-equiv=\"refresh\" content=\"5\"></noscript>"));
        assert!(html.contains("<main id=\"status\">"));
        assert!(!html.contains("http://") && !html.contains("https://"), "no external asset");
        let csp = content_security_policy("abc");
        assert!(csp.contains("script-src 'nonce-abc'") && csp.starts_with("default-src 'none'"));
        assert_ne!(nonce(), nonce());
        assert_eq!(nonce().len(), 32);
    }

    #[test]
    fn container_states() {
        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: Some("back-off 10s restarting failed container=app".into()),
            }),
            ..Default::default()
        };
        let terminated = ContainerState {
            terminated: Some(ContainerStateTerminated {
                reason: Some("Error".into()),
                exit_code: 137,
                ..Default::default()
            }),
            ..Default::default()
        };
        let pods = [
            PodPage { pod: pod("waiting", false, waiting), probes: Vec::new() },
            PodPage { pod: pod("terminated", false, terminated), probes: Vec::new() },
        ];
        let html = render_one(&pods, &[]);
        assert!(section(&html, "default/waiting").contains(
            "<td class=\"state\"><span class=\"state-waiting\">Waiting: CrashLoopBackOff</span> <span class=\"message\" title=\"back-off 10s restarting failed container=app\">back-off 10s restarting failed container=app</span></td>"
        ), "{html}");
        assert!(
            section(&html, "default/terminated")
                .contains("<span class=\"state-terminated\">Terminated: Error (exit 137)</span>")
        );
    }

    #[test]
    fn ages_and_durations() {
        assert_eq!(age(at(42), at(0)), "42s");
        assert_eq!(age(at(192), at(0)), "3m12s");
        assert_eq!(age(at(7500), at(0)), "2h5m");
        assert_eq!(age(at(356_400), at(0)), "4d3h");
        assert_eq!(age(at(0), at(5)), "0s", "a clock step back is not a negative age");
        assert_eq!(duration(0.0042), "4.2 ms");
        assert_eq!(duration(1.5), "1.50 s");
        assert_eq!(result_class("UNKNOWN"), "unknown");
    }
}
