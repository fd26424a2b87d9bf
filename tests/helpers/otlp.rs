//! An OTLP/HTTP receiver standing in for an OpenTelemetry collector: it accepts every
//! `POST /v1/traces` and decodes the protobuf export into [`ReceivedSpan`]s, with the
//! OpenTelemetry project's own generated definitions (`opentelemetry-proto`).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, KeyValue};
use prost::Message;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One span as exported, its ids in hex and its attribute values as text.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a span that starts its trace.
    pub parent_span_id: String,
    /// OTLP's `SpanKind`: 1 internal, 2 server, 3 client, 4 producer.
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    /// `(trace id, span id)` of each linked span.
    pub links: Vec<(String, String)>,
    /// 2: error.
    pub status_code: i32,
    pub status_message: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The exporting process's resource attributes (`service.name`, …).
    pub resource: BTreeMap<String, String>,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

/// The receiver: a wiremock server answering 200 to every export.
pub struct OtlpReceiver {
    pub server: wiremock::MockServer,
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::method("POST"))
            .and(wiremock::matchers::path("/v1/traces"))
            .respond_with(wiremock::ResponseTemplate::new(200))
            .mount(&server)
            .await;
        Self { server }
    }

    /// The `[telemetry]` lines that export here, every trace sampled, within 100 ms.
    pub fn telemetry(&self, ratio: f64) -> String {
        format!(
            "otlp_endpoint = \"{}\"\nsampling_ratio = {ratio}\nbatch_delay = \"100ms\"\n\
             service_name = \"inlet-test\"\nresource_attributes = {{ \"deployment.environment\" = \"test\" }}",
            self.server.uri()
        )
    }

    /// How many exports arrived.
    pub async fn exports(&self) -> usize {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .len()
    }

    /// Every span received so far, decoded.
    pub async fn spans(&self) -> Vec<ReceivedSpan> {
        let requests = self.server.received_requests().await.unwrap_or_default();
        let mut spans = Vec::new();
        for request in requests {
            assert_eq!(
                request
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok()),
                Some("application/x-protobuf"),
                "OTLP/HTTP with protobuf"
            );
            let export = ExportTraceServiceRequest::decode(request.body.as_slice())
                .expect("an OTLP trace export");
            for resource_spans in export.resource_spans {
                let resource = (resource_spans.resource)
                    .map(|r| attributes(&r.attributes))
                    .unwrap_or_default();
                for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
                    spans.push(ReceivedSpan {
                        name: span.name,
                        trace_id: hex::encode(span.trace_id),
                        span_id: hex::encode(span.span_id),
                        parent_span_id: hex::encode(span.parent_span_id),
                        kind: span.kind,
                        attributes: attributes(&span.attributes),
                        links: (span.links.iter())
                            .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                            .collect(),
                        status_code: span.status.as_ref().map_or(0, |s| s.code),
                        status_message: span.status.map(|s| s.message).unwrap_or_default(),
                        start_ns: span.start_time_unix_nano,
                        end_ns: span.end_time_unix_nano,
                        resource: resource.clone(),
                    });
                }
            }
        }
        spans
    }
}

fn attributes(pairs: &[KeyValue]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|pair| {
            let value = match pair.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(text)) => text.clone(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::IntValue(n)) => n.to_string(),
                Some(Value::DoubleValue(x)) => x.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (pair.key.clone(), value)
        })
        .collect()
}

/// A trace as an indented tree, each span with its duration and attributes: what the
/// docs show as the receiver's decoded output.
pub fn trace_tree(spans: &[ReceivedSpan], trace_id: &str) -> String {
    let in_trace: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.trace_id == trace_id).collect();
    let mut out = format!("trace {trace_id}\n");
    let ids: Vec<&str> = in_trace.iter().map(|s| s.span_id.as_str()).collect();
    let roots = in_trace
        .iter()
        .filter(|s| !ids.contains(&s.parent_span_id.as_str()));
    for root in roots {
        write_span(&mut out, &in_trace, root, 1);
    }
    out
}

fn write_span(out: &mut String, spans: &[&ReceivedSpan], span: &ReceivedSpan, depth: usize) {
    let kind = ["?", "internal", "server", "client", "producer", "consumer"]
        .get(usize::try_from(span.kind).unwrap_or(0))
        .copied()
        .unwrap_or("?");
    let micros = span.end_ns.saturating_sub(span.start_ns) / 1_000;
    let indent = "  ".repeat(depth);
    let _ = writeln!(
        out,
        "{indent}{} [{kind}] {micros} µs span {}",
        span.name, span.span_id
    );
    for (key, value) in &span.attributes {
        let _ = writeln!(out, "{indent}    {key} = {value}");
    }
    for (trace, linked) in &span.links {
        let _ = writeln!(out, "{indent}    link → trace {trace} span {linked}");
    }
    let mut children: Vec<&&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.parent_span_id == span.span_id)
        .collect();
    children.sort_by_key(|s| s.start_ns);
    for child in children {
        write_span(out, spans, child, depth + 1);
    }
}
