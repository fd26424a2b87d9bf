//! OpenTelemetry traces, exported over OTLP/HTTP (protobuf) when `[telemetry]
//! otlp_endpoint` is set, and nothing at all otherwise: every span helper returns an
//! empty [`Span`] at once when tracing is off, before it reads a header or builds an
//! attribute.
//!
//! Spans are started with explicit parents and times rather than through `tracing`'s
//! current span: a webhook's trace crosses threads (the writers' group commit) and the
//! database (a delivery leased minutes later, by any instance, continues the trace whose
//! `traceparent` the event's row keeps), so its parent is always passed by hand.
//!
//! No payload and no secret becomes an attribute: only names (source, destination,
//! event id and type), outcomes, statuses, sizes and `host:port`.

use crate::duration::span as duration;
use crate::error::ConfigError;
use crate::secret::Secret;
use bytes::Bytes;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Link, Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, Tracer,
};
use opentelemetry_sdk::Resource;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use opentelemetry::trace::SpanContext;
pub use opentelemetry::trace::SpanKind as Kind;
pub use opentelemetry::KeyValue as Attribute;

/// The OTLP/HTTP path of traces, added to an endpoint given without a path.
const TRACES_PATH: &str = "/v1/traces";
/// The most bytes of a collector's answer read.
const MAX_ANSWER: usize = 64 * 1024;

/// `[telemetry]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TelemetryFile {
    otlp_endpoint: Option<String>,
    sampling_ratio: Option<f64>,
    service_name: Option<String>,
    #[serde(default)]
    resource_attributes: BTreeMap<String, String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    export_timeout: Option<String>,
    batch_delay: Option<String>,
}

/// `[telemetry]`, validated.
#[derive(Debug, Clone)]
pub struct TelemetrySettings {
    /// Where spans are POSTed (`…/v1/traces`); `None`: tracing is off.
    pub otlp_endpoint: Option<String>,
    /// The share of new traces recorded (a continued trace follows its parent's choice).
    pub sampling_ratio: f64,
    pub service_name: String,
    pub resource_attributes: Vec<(String, String)>,
    /// Sent with every export (a collector's API key): resolved secrets, never shown.
    pub headers: Vec<(String, Secret)>,
    pub export_timeout: Duration,
    /// How long finished spans wait to be exported together.
    pub batch_delay: Duration,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        TelemetryFile::default()
            .validate()
            .unwrap_or_else(|_| unreachable!("the defaults are valid"))
    }
}

impl TelemetryFile {
    pub fn validate(self) -> Result<TelemetrySettings, ConfigError> {
        let otlp_endpoint = self.otlp_endpoint.map(|url| endpoint(&url)).transpose()?;
        let sampling_ratio = self.sampling_ratio.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&sampling_ratio) {
            return Err(ConfigError::new(
                "telemetry.sampling_ratio",
                "must be between 0.0 and 1.0",
            ));
        }
        let headers = self
            .headers
            .into_iter()
            .map(|(name, value)| {
                let key = format!("telemetry.headers.{name}");
                http::HeaderName::try_from(name.as_str())
                    .map_err(|_| ConfigError::new(&key, "not a valid header name"))?;
                let secret = Secret::resolve(&value).map_err(|e| ConfigError::new(&key, e))?;
                Ok((name, secret))
            })
            .collect::<Result<_, ConfigError>>()?;
        Ok(TelemetrySettings {
            otlp_endpoint,
            sampling_ratio,
            service_name: self.service_name.unwrap_or_else(|| "inlet".to_owned()),
            resource_attributes: self.resource_attributes.into_iter().collect(),
            headers,
            export_timeout: bounded(
                "telemetry.export_timeout",
                self.export_timeout.as_deref(),
                "10s",
                (Duration::from_secs(1), Duration::from_secs(60)),
            )?,
            batch_delay: bounded(
                "telemetry.batch_delay",
                self.batch_delay.as_deref(),
                "5s",
                (Duration::from_millis(100), Duration::from_secs(60)),
            )?,
        })
    }
}

/// The duration `key` (`default` when unset), within `(min, max)`.
fn bounded(
    key: &str,
    value: Option<&str>,
    default: &str,
    (min, max): (Duration, Duration),
) -> Result<Duration, ConfigError> {
    let found = duration(key, value, default)?;
    if found < min || found > max {
        return Err(ConfigError::new(
            key,
            format!(
                "must be between {} and {}",
                crate::duration::HumanDuration(min),
                crate::duration::HumanDuration(max)
            ),
        ));
    }
    Ok(found)
}

/// `url` as the traces endpoint: http or https, [`TRACES_PATH`] added when it has no path.
fn endpoint(url: &str) -> Result<String, ConfigError> {
    let key = "telemetry.otlp_endpoint";
    let mut parsed =
        reqwest::Url::parse(url).map_err(|e| ConfigError::new(key, format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(ConfigError::new(key, "must be an http:// or https:// URL"));
    }
    // The URL is logged and shown; a credential belongs in a header, which is a secret.
    if !parsed.username().is_empty() || parsed.password().is_some() || parsed.query().is_some() {
        return Err(ConfigError::new(
            key,
            "must carry no credentials (user, password or query): put an API key in \
             telemetry.headers, whose values are secrets",
        ));
    }
    if parsed.path() == "/" {
        parsed.set_path(TRACES_PATH);
    }
    Ok(parsed.to_string())
}

/// The process's tracer: off (the default), or exporting to a collector.
#[derive(Clone, Default)]
pub struct Traces(Option<Arc<Exporting>>);

struct Exporting {
    provider: SdkTracerProvider,
    tracer: Tracer,
    /// How long a stop waits for the last spans to go out.
    last_export: Duration,
}

impl Traces {
    /// Tracing as `settings` say: off without an endpoint. Exports run on `runtime`.
    pub fn start(
        settings: &TelemetrySettings,
        runtime: tokio::runtime::Handle,
    ) -> anyhow::Result<Self> {
        let Some(url) = &settings.otlp_endpoint else {
            return Ok(Self::default());
        };
        let provider = provider(settings, url, runtime)?;
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "inlet");
        let last_export = settings.export_timeout;
        Ok(Self(Some(Arc::new(Exporting {
            provider,
            tracer,
            last_export,
        }))))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// A span under `parent`, from `start` (now when `None`); `attributes` is called only
    /// when tracing is on.
    pub fn span(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: &Context,
        start: Option<SystemTime>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Span {
        self.linked(name, kind, parent, start, attributes, Vec::new())
    }

    /// [`Traces::span`] with links to other spans.
    pub fn linked(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: &Context,
        start: Option<SystemTime>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
        links: Vec<SpanContext>,
    ) -> Span {
        let Some(exporting) = &self.0 else {
            return Span(None);
        };
        let builder = exporting
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(start.unwrap_or_else(SystemTime::now))
            .with_attributes(attributes())
            .with_links(links.into_iter().map(Link::with_context).collect());
        Span(Some(builder.start_with_context(&exporting.tracer, parent)))
    }

    /// Sends what is still buffered, waiting at most `export_timeout`, and stops exporting
    /// (blocking: call it off the runtime, which the export needs).
    pub fn shutdown(&self) {
        if let Some(exporting) = &self.0 {
            if let Err(error) = exporting
                .provider
                .shutdown_with_timeout(exporting.last_export)
            {
                tracing::warn!(%error, "the last spans could not be exported");
            }
        }
    }
}

/// The span of a request from outside (a webhook, an operator action), started only once
/// the request is verified or refused: a sender's `traceparent` is continued only for a
/// request that proved itself, so that no one without a source's secret (or an operator's
/// token) can choose a trace to write into or have a trace recorded whatever
/// `sampling_ratio` says. A `tracestate` is never read. The span starts at the request's
/// arrival all the same.
pub struct Incoming {
    traces: Traces,
    /// When the request arrived (tracing on).
    arrival: Option<SystemTime>,
    /// The sender's `traceparent`, as sent (tracing on, at most 55 bytes).
    remote: Option<String>,
    name: Cow<'static, str>,
    attributes: Vec<KeyValue>,
    span: Option<Span>,
}

/// The length of a version-00 `traceparent`.
const TRACEPARENT_LENGTH: usize = 55;

impl Traces {
    /// A request's [`Incoming`] span, not started yet; `attributes` is called only when
    /// tracing is on.
    pub fn incoming(
        &self,
        name: impl Into<Cow<'static, str>>,
        traceparent: Option<&str>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Incoming {
        let on = self.is_on();
        Incoming {
            traces: self.clone(),
            arrival: on.then(SystemTime::now),
            remote: traceparent
                .filter(|value| on && value.len() == TRACEPARENT_LENGTH)
                .map(str::to_owned),
            name: if on { name.into() } else { Cow::Borrowed("") },
            attributes: if on { attributes() } else { Vec::new() },
            span: None,
        }
    }
}

impl Incoming {
    /// Starts the span, once: under the sender's trace when the request is `trusted`
    /// (verified), else as a trace of its own.
    pub fn start(&mut self, trusted: bool) -> &mut Span {
        let Incoming {
            traces,
            arrival,
            remote,
            name,
            attributes,
            span,
        } = self;
        span.get_or_insert_with(|| {
            let parent = match trusted {
                true => parent_of(remote.as_deref()),
                false => Context::new(),
            };
            let name = std::mem::take(name);
            traces.span(name, SpanKind::Server, &parent, *arrival, || {
                std::mem::take(attributes)
            })
        })
    }

    /// The span, started as untrusted if it was not started yet.
    pub fn span(&mut self) -> &mut Span {
        self.start(false)
    }

    /// A finished step of the request, from `started` to now, under its span (tracing on);
    /// `error` marks it failed.
    pub fn step(
        &mut self,
        name: &'static str,
        started: Option<SystemTime>,
        error: Option<&dyn std::fmt::Display>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) {
        if started.is_none() {
            return;
        }
        let parent = self.span().as_parent();
        let mut span = self
            .traces
            .span(name, SpanKind::Internal, &parent, started, attributes);
        if let Some(error) = error {
            span.fail("refused", &error.to_string());
        }
    }

    /// Now, when tracing is on: the start of a step's span.
    pub fn now(&self) -> Option<SystemTime> {
        self.arrival.is_some().then(SystemTime::now)
    }
}

/// A `SdkTracerProvider` exporting in batches to `url` through Inlet's own HTTP client.
fn provider(
    settings: &TelemetrySettings,
    url: &str,
    runtime: tokio::runtime::Handle,
) -> anyhow::Result<SdkTracerProvider> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let client = reqwest::Client::builder()
        .timeout(settings.export_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let headers = (settings.headers.iter())
        .map(|(name, value)| (name.clone(), value.expose().to_owned()))
        .collect();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Export { client, runtime })
        .with_endpoint(url)
        .with_timeout(settings.export_timeout)
        .with_headers(headers)
        .build()?;
    let batch = BatchConfigBuilder::default()
        .with_scheduled_delay(settings.batch_delay)
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attributes(
            (settings.resource_attributes.iter())
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
        settings.sampling_ratio,
    )));
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler)
        .with_resource(resource)
        .build())
}

/// The exporter's HTTP client: Inlet's `reqwest`, run on Inlet's runtime (the batch
/// processor exports from a thread of its own, outside any runtime).
#[derive(Debug)]
struct Export {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Export {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let answer = self.runtime.spawn(async move {
            let mut response = client.execute(request).await?;
            let mut answer = http::Response::builder().status(response.status());
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                body.extend_from_slice(&chunk);
                if body.len() > MAX_ANSWER {
                    return Err(format!("the collector's answer is over {MAX_ANSWER} bytes").into());
                }
            }
            if let Some(headers) = answer.headers_mut() {
                *headers = std::mem::take(response.headers_mut());
            }
            Ok::<_, opentelemetry_http::HttpError>(answer.body(Bytes::from(body))?)
        });
        let answer = answer.await.map_err(Into::into).and_then(|answer| answer);
        count_export(&answer);
        answer
    }
}

/// Each export counted (`inlet_trace_exports_total{result}`), and a failed one logged: a
/// collector that refuses or is away shows, while webhooks go on unaffected.
fn count_export(answer: &Result<http::Response<Bytes>, opentelemetry_http::HttpError>) {
    let failure = match answer {
        Ok(response) if response.status().is_success() => None,
        Ok(response) => Some(format!("the collector answered {}", response.status())),
        Err(error) => Some(error.to_string()),
    };
    let result = if failure.is_some() { "failed" } else { "ok" };
    metrics::counter!("inlet_trace_exports_total", "result" => result).increment(1);
    if let Some(error) = failure {
        tracing::warn!(%error, "spans could not be exported to telemetry.otlp_endpoint");
    }
}

/// A header map seen through a lookup function, for the propagator.
struct HeaderLookup<'f, 'h, F>(&'f F, std::marker::PhantomData<&'h str>);

impl<'h, F: Fn(&str) -> Option<&'h str>> Extractor for HeaderLookup<'_, 'h, F> {
    fn get(&self, key: &str) -> Option<&str> {
        (self.0)(key)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// A started span, or nothing (tracing off). Ends when dropped, or at a given time.
#[derive(Debug)]
pub struct Span(Option<opentelemetry_sdk::trace::Span>);

impl Span {
    /// Nothing: what every span is when tracing is off.
    pub fn none() -> Self {
        Self(None)
    }

    /// Its context (invalid when there is no span).
    pub fn context(&self) -> SpanContext {
        (self.0.as_ref()).map_or_else(SpanContext::empty_context, |s| s.span_context().clone())
    }

    /// A parent for spans under this one.
    pub fn as_parent(&self) -> Context {
        parent(&self.context())
    }

    /// Its `traceparent` header value, to continue its trace elsewhere.
    pub fn trace_parent(&self) -> Option<String> {
        trace_parent(&self.context())
    }

    /// Whether it records (tracing on, sampled): attributes are worth building.
    pub fn is_recording(&self) -> bool {
        self.0.as_ref().is_some_and(|span| span.is_recording())
    }

    pub fn set(&mut self, attribute: KeyValue) {
        if let Some(span) = &mut self.0 {
            span.set_attribute(attribute);
        }
    }

    /// Marks it failed: `error.type` (a short, bounded code) and the status.
    pub fn fail(&mut self, error_type: &str, description: &str) {
        if let Some(span) = &mut self.0 {
            span.set_attribute(KeyValue::new("error.type", error_type.to_owned()));
            span.set_status(Status::error(description.to_owned()));
        }
    }

    pub fn end_at(mut self, at: SystemTime) {
        if let Some(span) = &mut self.0 {
            span.end_with_timestamp(at);
        }
    }
}

/// No parent: a span that starts a trace.
pub fn root() -> Context {
    Context::new()
}

/// A parent context for a span whose parent is `context` (remote or ended).
pub fn parent(context: &SpanContext) -> Context {
    match context.is_valid() {
        true => Context::new().with_remote_span_context(context.clone()),
        false => Context::new(),
    }
}

/// The context a stored `traceparent` names (none when it is missing or malformed).
pub fn parent_of(trace_parent: Option<&str>) -> Context {
    let Some(value) = trace_parent else {
        return Context::new();
    };
    let header = |name: &str| (name == "traceparent").then_some(value);
    TraceContextPropagator::new().extract(&HeaderLookup(&header, std::marker::PhantomData))
}

/// The span context a stored `traceparent` names (invalid when missing or malformed).
pub fn context_of(trace_parent: Option<&str>) -> SpanContext {
    parent_of(trace_parent).span().span_context().clone()
}

/// `00-{trace id}-{span id}-{flags}`: a span's context as a W3C `traceparent`.
pub fn trace_parent(context: &SpanContext) -> Option<String> {
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// The trace id of a stored `traceparent` value, when it names a valid one.
pub fn trace_id_of(trace_parent: &str) -> Option<String> {
    trace_id(&context_of(Some(trace_parent)))
}

/// The trace id of a span's context, for log lines (`None` when there is none).
pub fn trace_id(context: &SpanContext) -> Option<String> {
    context.is_valid().then(|| context.trace_id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_without_a_path_gets_the_traces_path() {
        assert_eq!(
            endpoint("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            endpoint("https://otlp.example.com/otlp/v1/traces").unwrap(),
            "https://otlp.example.com/otlp/v1/traces"
        );
        assert!(endpoint("ftp://x").is_err());
        assert!(endpoint("https://user:key@otlp.example.com").is_err());
        assert!(endpoint("https://otlp.example.com/v1/traces?api_key=k").is_err());
        assert!(endpoint("not a url").is_err());
    }

    #[test]
    fn a_stored_trace_parent_is_read_back() {
        let value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parent_of(Some(value));
        let span = context.span();
        assert_eq!(trace_parent(span.span_context()).as_deref(), Some(value));
        assert_eq!(
            trace_id_of(value).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        let zeros = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        assert_eq!(trace_id_of(zeros), None);
        assert!(!parent_of(Some("00-zz-yy-01"))
            .span()
            .span_context()
            .is_valid());
        assert!(!parent_of(None).span().span_context().is_valid());
    }

    #[test]
    fn tracing_off_makes_no_span_and_calls_nothing() {
        let traces = Traces::default();
        let span = traces.span("x", Kind::Internal, &Context::new(), None, || {
            unreachable!("attributes are not built when tracing is off")
        });
        assert!(!span.context().is_valid());
        assert_eq!(span.trace_parent(), None);
    }

    #[test]
    fn the_ratio_is_between_zero_and_one() {
        let file = TelemetryFile {
            sampling_ratio: Some(1.5),
            ..TelemetryFile::default()
        };
        assert_eq!(file.validate().unwrap_err().key, "telemetry.sampling_ratio");
    }
}
