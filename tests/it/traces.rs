//! `[telemetry]`: the gateway (a process of its own: the exporter is the process's)
//! exports its spans over OTLP/HTTP to a receiver in the test, which decodes them with
//! the OpenTelemetry proto definitions; the fake provider shows what was propagated.

use std::collections::HashMap;

use http::Method;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use crate::support::{
    Answer, DEMO, Fake, Http, MODEL_CENTER, Proc, Routes, Seen, eventually, free_port,
};

const SUBMIT: &str = "POST /v2/model-center/tasks";
const TRACES: &str = "POST /v1/traces";
const REQUEST_SPAN: &str = "POST /v2/model-center/tasks";

/// A fake provider answering submits, and a gateway exporting to `endpoint` every
/// 50 ms.
async fn gateway(endpoint: &str) -> (Fake, Proc) {
    gateway_sampling(endpoint, 1.0).await
}

/// The same, new traces sampled at `ratio`.
async fn gateway_sampling(endpoint: &str, ratio: f64) -> (Fake, Proc) {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::queued("up-1"));
    let gateway = gateway_to(&fake.url(), endpoint, ratio).await;
    (fake, gateway)
}

/// A gateway whose provider is at `upstream`.
async fn gateway_to(upstream: &str, endpoint: &str, ratio: f64) -> Proc {
    let routes = Routes::upstream(upstream, "")
        .server("metrics_listen = \"127.0.0.1:0\"")
        .top(&format!(
            "[telemetry]\notlp_endpoint = \"{endpoint}\"\nexport_interval_ms = 50\n\
             sampling_ratio = {ratio:?}\nservice_name = \"gw-under-test\"\n\
             [telemetry.resource_attributes]\n\"deployment.environment\" = \"test\""
        ));
    Proc::start(routes).await
}

/// A started receiver that accepts every export.
async fn receiver() -> Fake {
    let receiver = Fake::start().await;
    receiver.on(TRACES, Answer::raw(200, "application/x-protobuf", ""));
    receiver
}

async fn submit(http: &Http, extra: &[(&str, &str)]) {
    let auth = format!("Bearer {DEMO}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    let body = json!({"model": "m1", "prompt": "a fox"}).to_string();
    let reply = http.send(Method::POST, MODEL_CENTER, &headers, body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

/// Every span received so far is added to `spans`; the resource attributes of the
/// exports are checked on the way.
fn decode_into(receiver: &Fake, spans: &mut Vec<Span>) {
    for seen in receiver.take() {
        assert_eq!(seen.line(), TRACES);
        assert_eq!(seen.header("content-type"), Some("application/x-protobuf"));
        let export = ExportTraceServiceRequest::decode(seen.body).expect("an OTLP export");
        for resource in export.resource_spans {
            let attrs = resource.resource.map(|r| r.attributes).unwrap_or_default();
            let attrs: HashMap<_, _> = attrs
                .into_iter()
                .map(|kv| (kv.key, text(kv.value)))
                .collect();
            assert_eq!(attrs["service.name"], "gw-under-test");
            assert_eq!(attrs["deployment.environment"], "test");
            spans.extend(resource.scope_spans.into_iter().flat_map(|s| s.spans));
        }
    }
}

/// Wait until spans named `names` have all arrived; every span received.
async fn spans_named(receiver: &Fake, names: &[&str]) -> Vec<Span> {
    let mut spans = Vec::new();
    eventually("the spans reach the receiver", async || {
        decode_into(receiver, &mut spans);
        names.iter().all(|n| spans.iter().any(|s| s.name == *n))
    })
    .await;
    spans
}

fn named<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans.iter().find(|s| s.name == name).unwrap()
}

fn text(value: Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value) {
        Some(AnyValue::StringValue(s)) => s,
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// An attribute that must be an integer (not its text).
fn int_attr(span: &Span, key: &str) -> Option<i64> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .clone();
    match value.and_then(|v| v.value) {
        Some(AnyValue::IntValue(i)) => Some(i),
        other => panic!("{key} is not an integer: {other:?}"),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| text(kv.value.clone()))
}

#[tokio::test]
async fn a_submit_is_one_trace_of_request_ledger_and_upstream_spans() {
    let receiver = receiver().await;
    let (fake, gw) = gateway(&receiver.url()).await;
    submit(&gw.client(), &[]).await;

    let names = [
        REQUEST_SPAN,
        "ledger.admit",
        "upstream submit",
        "ledger.record",
    ];
    let spans = spans_named(&receiver, &names).await;
    let request = named(&spans, REQUEST_SPAN);
    assert!(request.parent_span_id.is_empty(), "a trace of its own");
    assert_eq!(attr(request, "http.route").as_deref(), Some(MODEL_CENTER));
    assert_eq!(
        attr(request, "http.request.method").as_deref(),
        Some("POST")
    );
    assert_eq!(int_attr(request, "http.response.status_code"), Some(200));
    assert_eq!(attr(request, "mediagate.model").as_deref(), Some("m1"));
    assert_eq!(attr(request, "mediagate.key").as_deref(), Some("demo"));
    assert_eq!(attr(request, "mediagate.error_code"), None);
    for name in &names[1..] {
        let child = named(&spans, name);
        assert_eq!(
            child.trace_id, request.trace_id,
            "{name}: the request's trace"
        );
        assert_eq!(
            child.parent_span_id, request.span_id,
            "{name}: the request's child"
        );
    }
    let upstream = named(&spans, "upstream submit");
    assert_eq!(attr(upstream, "mediagate.provider").as_deref(), Some("up"));
    assert_eq!(attr(upstream, "mediagate.step").as_deref(), Some("submit"));
    assert_eq!(int_attr(upstream, "mediagate.attempt"), Some(1));
    assert_eq!(int_attr(upstream, "http.response.status_code"), Some(200));

    // The provider got the upstream span's context.
    let sent = submitted(&fake);
    let traceparent = sent.header("traceparent").unwrap();
    let expected = format!(
        "00-{}-{}-01",
        hex(&request.trace_id),
        hex(&upstream.span_id)
    );
    assert_eq!(traceparent, expected);
    // No trace state came in: none is sent, not even an empty one.
    assert_eq!(sent.header("tracestate"), None);

    // No secret in any span: not the client's key, nor the provider's.
    let all = format!("{spans:?}");
    assert!(!all.contains(DEMO), "the client key leaked into a span");
    assert!(
        !all.to_lowercase().contains("bearer"),
        "a credential leaked into a span"
    );
}

#[tokio::test]
async fn an_incoming_traceparent_is_continued_and_reaches_the_provider() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";
    let receiver = receiver().await;
    let (fake, gw) = gateway(&receiver.url()).await;
    let incoming = format!("00-{TRACE}-{PARENT}-01");
    submit(&gw.client(), &[("traceparent", &incoming)]).await;

    let spans = spans_named(&receiver, &[REQUEST_SPAN, "upstream submit"]).await;
    let request = named(&spans, REQUEST_SPAN);
    assert_eq!(hex(&request.trace_id), TRACE);
    assert_eq!(hex(&request.parent_span_id), PARENT);
    let upstream = named(&spans, "upstream submit");
    assert_eq!(upstream.trace_id, request.trace_id);

    let sent = submitted(&fake);
    let traceparent = sent.header("traceparent").unwrap();
    assert_eq!(
        traceparent,
        format!("00-{TRACE}-{}-01", hex(&upstream.span_id))
    );
}

#[tokio::test]
async fn a_receiver_that_is_down_affects_no_request_and_its_losses_are_counted() {
    let (_fake, gw) = gateway(&format!("http://127.0.0.1:{}", free_port())).await;
    for _ in 0..3 {
        submit(&gw.client(), &[]).await;
    }
    let admin = Http::new(gw.admin_addr.expect("metrics listener"));
    eventually("the failed export is counted", async || {
        let metrics = admin.get_bare("/metrics").await.text();
        let value = |name: &str| -> u64 {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
                .map_or(0, |v| v as u64)
        };
        value("mediagate_trace_export_failures_total ") >= 1
            && value("mediagate_trace_spans_dropped_total ") >= 3
            // The gateway's log reaches the test through a pipe: the line may come
            // after the counters.
            && gw.count_in_log("trace export failed") >= 1
    })
    .await;
    // Still answering, as before.
    submit(&gw.client(), &[]).await;
    assert_eq!(gw.count_in_log("trace export failed"), 1, "{}", gw.log());
}

#[tokio::test]
async fn at_ratio_0_only_a_client_s_sampled_trace_is_exported_and_an_unsampled_one_is_passed_on() {
    const UNSAMPLED: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    const STATE: &str = "vendor=opaque";
    const SAMPLED_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let receiver = receiver().await;
    let (fake, gw) = gateway_sampling(&receiver.url(), 0.0).await;
    let http = gw.client();

    // A client's unsampled trace: nothing exported, its context handed on unchanged.
    submit(&http, &[("traceparent", UNSAMPLED), ("tracestate", STATE)]).await;
    let sent = submitted(&fake);
    assert_eq!(sent.header("traceparent"), Some(UNSAMPLED));
    assert_eq!(sent.header("tracestate"), Some(STATE));

    // A new trace at ratio 0: not sampled, nothing to hand on.
    submit(&http, &[]).await;
    assert_eq!(submitted(&fake).header("traceparent"), None);

    // A client's sampled trace: exported whatever the ratio (parent-based).
    let sampled = format!("00-{SAMPLED_TRACE}-00f067aa0ba902b7-01");
    submit(&http, &[("traceparent", &sampled)]).await;
    let sent = submitted(&fake);
    let mut spans = spans_named(&receiver, &[REQUEST_SPAN, "upstream submit"]).await;
    let upstream = named(&spans, "upstream submit");
    assert_eq!(
        sent.header("traceparent").unwrap(),
        format!("00-{SAMPLED_TRACE}-{}-01", hex(&upstream.span_id))
    );
    // Spans are queued as they end and exported in that order, so those of the
    // earlier requests, had there been any, came no later than these.
    decode_into(&receiver, &mut spans);
    for span in &spans {
        assert_eq!(
            hex(&span.trace_id),
            SAMPLED_TRACE,
            "{}: exported",
            span.name
        );
    }
}

#[tokio::test]
async fn a_traced_request_is_logged_as_an_untraced_one() {
    let receiver = receiver().await;
    let (_fake, gw) = gateway(&receiver.url()).await;
    submit(&gw.client(), &[]).await;
    spans_named(&receiver, &[REQUEST_SPAN]).await;
    let log = gw.log();
    let access = log
        .lines()
        .find(|l| l.contains("mediagate::access"))
        .expect("an access line");
    // The request span as the log has it without traces: its id alone.
    assert!(
        access.contains("INFO request{request_id=") && access.contains("}: mediagate::access: "),
        "{access}"
    );
    for traced in ["otel.", "http.route", "upstream submit", "ledger."] {
        assert!(!log.contains(traced), "{traced} in the log:\n{log}");
    }
}

#[tokio::test]
async fn warnings_logged_in_a_traced_span_are_its_events_and_the_access_line_is_not() {
    let receiver = receiver().await;
    // A provider that does not answer: the submit is refused, with a warning logged
    // while its upstream span is current.
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let gw = gateway_to(&nobody, &receiver.url(), 1.0).await;
    let auth = format!("Bearer {DEMO}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let body = json!({"model": "m1", "prompt": "a fox"}).to_string();
    let reply = gw
        .client()
        .send(Method::POST, MODEL_CENTER, &headers, body)
        .await;
    assert!(reply.status.is_server_error(), "{}", reply.text());

    let spans = spans_named(&receiver, &[REQUEST_SPAN, "upstream submit"]).await;
    let upstream = named(&spans, "upstream submit");
    assert!(
        upstream
            .events
            .iter()
            .any(|e| e.name == "submit: no answer"),
        "{:?}",
        upstream.events
    );
    let request = named(&spans, REQUEST_SPAN);
    assert!(
        request.events.iter().all(|e| e.name != "request"),
        "the access line became an event: {:?}",
        request.events
    );
    assert_eq!(gw.count_in_log("submit: no answer"), 1, "{}", gw.log());
}

#[tokio::test]
async fn a_submit_whose_client_left_stays_in_its_trace() {
    let receiver = receiver().await;
    let fake = Fake::start().await;
    let held = fake.hold(SUBMIT, Answer::queued("up-late"));
    let gw = gateway_to(&fake.url(), &receiver.url(), 1.0).await;
    let http = gw.client();
    let gone = tokio::spawn(async move { submit(&http, &[]).await });
    held.arrived(1).await;
    gone.abort(); // the client hangs up while the provider works
    let _ = gone.await;
    held.release();

    // The rest of the submit, in a task of its own, is still the request's.
    let spans = spans_named(&receiver, &[REQUEST_SPAN, "ledger.record"]).await;
    let request = named(&spans, REQUEST_SPAN);
    let record = named(&spans, "ledger.record");
    assert_eq!(record.trace_id, request.trace_id);
    assert_eq!(record.parent_span_id, request.span_id);
}

/// The submit the fake provider received.
fn submitted(fake: &Fake) -> Seen {
    let seen = fake.take().into_iter().find(|s| s.line() == SUBMIT);
    seen.expect("the submit reached the provider")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
