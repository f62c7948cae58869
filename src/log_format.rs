//! The access line (one per request, target `mediagate::access`) written directly,
//! byte for byte what tracing-subscriber's own formatters write for it: they visit
//! each field through generic, padded `fmt` machinery, format the date anew for every
//! line and, in JSON, parse the span's fields back from text twice per line (1.3 µs a
//! line in text, 2.4 µs in JSON, against the few hundred nanoseconds of this one).
//! Every other event, and an access line in any unusual shape (another span around
//! it, colours on), is left to tracing-subscriber. [`PlainFields`] does the same for
//! the fields of spans and events in text (every request's span has one).

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::DefaultFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::calendar::civil_from_days;

/// The target of the access line.
pub const ACCESS: &str = "mediagate::access";

/// Which of tracing-subscriber's formats the line must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `Format<Full>`, colours off.
    Text,
    /// `Format<Json>` with `flatten_event(true)`.
    Json,
}

/// A formatter that writes the access line itself and hands every other event to
/// `inner` (which must be tracing-subscriber's formatter of the same [`Style`]).
pub struct AccessLine<F> {
    inner: F,
    style: Style,
}

impl<F> AccessLine<F> {
    pub fn new(inner: F, style: Style) -> Self {
        Self { inner, style }
    }
}

impl<S, N, F> FormatEvent<S, N> for AccessLine<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        // The shape written here: an info event in exactly one span, which has one
        // field (the request span and its id).
        let span = (meta.target() == ACCESS
            && *meta.level() == Level::INFO
            && event.is_contextual()
            && !writer.has_ansi_escapes())
        .then(|| ctx.lookup_current())
        .flatten()
        .filter(|span| span.parent().is_none() && span.metadata().fields().len() == 1);
        let Some(span) = span else {
            return self.inner.format_event(ctx, writer, event);
        };
        let extensions = span.extensions();
        let Some(span_fields) = extensions.get::<FormattedFields<N>>() else {
            return self.inner.format_event(ctx, writer, event);
        };
        let span_name = span.metadata().name();
        match self.style {
            Style::Text => {
                write_timestamp(&mut writer)?;
                writer.write_str("  INFO ")?;
                writer.write_str(span_name)?;
                if !span_fields.is_empty() {
                    write!(writer, "{{{}}}", span_fields.fields)?;
                }
                write!(writer, ": {ACCESS}: ")?;
                let mut fields = TextFields {
                    writer: &mut writer,
                    first: true,
                    result: Ok(()),
                };
                event.record(&mut fields);
                fields.result?;
            }
            Style::Json => {
                // The span's fields as its JSON object, without the closing brace.
                let Some(open) = span_fields
                    .fields
                    .strip_suffix('}')
                    .filter(|f| f.starts_with('{'))
                else {
                    return self.inner.format_event(ctx, writer, event);
                };
                writer.write_str("{\"timestamp\":\"")?;
                write_timestamp(&mut writer)?;
                writer.write_str("\",\"level\":\"INFO\"")?;
                let mut fields = JsonFields {
                    writer: &mut writer,
                    result: Ok(()),
                };
                event.record(&mut fields);
                fields.result?;
                write!(writer, ",\"target\":\"{ACCESS}\",\"span\":")?;
                let comma = if open.len() > 1 { "," } else { "" };
                let span = format_args!("{open}{comma}\"name\":{}}}", Json(span_name));
                write!(writer, "{span},\"spans\":[{span}]}}")?;
            }
        }
        writer.write_char('\n')
    }
}

/// The event's fields as `Format<Full>` writes them: the message, then `name=value`
/// with values in their `Debug` form, separated by spaces.
struct TextFields<'a, 'w> {
    writer: &'a mut Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl TextFields<'_, '_> {
    /// Starts a field: the space before it, and its name unless it is the message.
    /// `false` once writing failed.
    fn name(&mut self, field: &Field) -> bool {
        if self.result.is_ok() && !std::mem::take(&mut self.first) {
            self.result = self.writer.write_char(' ');
        }
        if self.result.is_ok() && field.name() != "message" {
            self.result = self
                .writer
                .write_str(field.name())
                .and_then(|()| self.writer.write_char('='));
        }
        self.result.is_ok()
    }

    fn value(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if self.name(field) {
            // tracing-subscriber spells out a message's terminal controls.
            self.result = if field.name() == "message" && self.writer.sanitizes_ansi_escapes() {
                Sanitized(&mut *self.writer).write_fmt(value)
            } else {
                self.writer.write_fmt(value)
            };
        }
    }
}

/// Writes through, with the characters that can steer a terminal spelled out as
/// tracing-subscriber's `EscapeGuard` spells them in a message (`\x1b`, `\u{9b}`):
/// ESC, BEL, BS, FF, DEL and the C1 controls.
struct Sanitized<'a, W>(&'a mut W);

impl<W: fmt::Write> fmt::Write for Sanitized<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let steers = |c: char| {
            matches!(
                c,
                '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' | '\u{80}'..='\u{9f}'
            )
        };
        let mut rest = s;
        while let Some(at) = rest.find(steers) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            if c.is_ascii() {
                write!(self.0, "\\x{:02x}", u32::from(c))?;
            } else {
                write!(self.0, "\\u{{{:x}}}", u32::from(c))?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

impl Visit for TextFields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            return self.value(field, format_args!("{value}"));
        }
        // Nothing `Debug` would escape: quoted as it is.
        let quoted = value
            .bytes()
            .all(|b| b == b' ' || (b.is_ascii_graphic() && b != b'"' && b != b'\\'));
        if !quoted {
            return self.value(field, format_args!("{value:?}"));
        }
        if self.name(field) {
            self.result = self
                .writer
                .write_char('"')
                .and_then(|()| self.writer.write_str(value))
                .and_then(|()| self.writer.write_char('"'));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.value(field, format_args!("{value}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.value(field, format_args!("{value}"));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.value(field, format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.value(field, format_args!("{value:?}"));
    }
}

/// The event's fields as flattened JSON entries, each preceded by a comma: strings
/// as strings, numbers and booleans as such, anything else as its `Debug` text.
struct JsonFields<'a, 'w> {
    writer: &'a mut Writer<'w>,
    result: fmt::Result,
}

impl JsonFields<'_, '_> {
    /// Starts an entry: `,"name":`. `false` once writing failed.
    fn name(&mut self, field: &Field) -> bool {
        if self.result.is_ok() {
            self.result = self
                .writer
                .write_char(',')
                .and_then(|()| json_string(self.writer, field.name()))
                .and_then(|()| self.writer.write_char(':'));
        }
        self.result.is_ok()
    }

    fn field(&mut self, field: &Field, value: impl fmt::Display) {
        if self.name(field) {
            self.result = write!(self.writer, "{value}");
        }
    }
}

impl Visit for JsonFields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.name(field) {
            self.result = json_string(self.writer, value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.field(field, JsonNumber(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        DEBUG_TEXT.with_borrow_mut(|text| {
            text.clear();
            let _ = write!(text, "{value:?}");
            if self.name(field) {
                self.result = json_string(self.writer, text);
            }
        });
    }
}

/// Span and event fields as tracing-subscriber's `DefaultFields` writes them with
/// colours off (`name=value`, each value in its `Debug` form, spaces between), without
/// the styling it passes every name through even then: that cost more than the rest of
/// the request span's making. Fields it writes in a way of its own (a message, an
/// error, `r#` and `log.` names) and coloured output are left to `DefaultFields`.
#[derive(Debug, Default)]
pub struct PlainFields(DefaultFields);

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        if !writer.has_ansi_escapes() {
            // Written aside first: a field met late may turn out to be another's.
            // (Aside is busy only if a `Debug` value logs while it is written.)
            let plain = FIELDS_TEXT.with(|text| {
                let mut text = text.try_borrow_mut().ok()?;
                text.clear();
                let mut visit = Plain {
                    text: &mut text,
                    plain: true,
                };
                fields.record(&mut visit);
                visit.plain.then(|| writer.write_str(&text))
            });
            if let Some(written) = plain {
                return written;
            }
        }
        self.0.format_fields(writer, fields)
    }
}

/// The visitor of [`PlainFields`]; `plain` turns false at a field it does not write
/// as `DefaultFields` does.
struct Plain<'a> {
    text: &'a mut String,
    plain: bool,
}

impl Visit for Plain<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &value);
    }

    fn record_error(&mut self, _: &Field, _: &(dyn std::error::Error + 'static)) {
        self.plain = false;
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if !self.plain || name == "message" || name.starts_with("r#") || name.starts_with("log.") {
            self.plain = false;
            return;
        }
        if !self.text.is_empty() {
            self.text.push(' ');
        }
        self.plain = write!(self.text, "{name}={value:?}").is_ok();
    }
}

thread_local! {
    /// The fields [`PlainFields`] writes, before they are known to be plain.
    static FIELDS_TEXT: RefCell<String> = const { RefCell::new(String::new()) };
    /// A `Debug` value's text before it is escaped into a JSON string.
    static DEBUG_TEXT: RefCell<String> = const { RefCell::new(String::new()) };
    /// The date and time to the second of the last line this thread wrote: the
    /// same for every line of a second.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// A string as serde_json writes it: quoted, with `"`, `\` and control characters
/// escaped.
struct Json<'a>(&'a str);

impl fmt::Display for Json<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        json_string(f, self.0)
    }
}

/// `s` as a JSON string, escaped as serde_json escapes it.
fn json_string(f: &mut impl fmt::Write, s: &str) -> fmt::Result {
    f.write_char('"')?;
    let mut rest = s;
    while let Some(at) = rest.find(|c: char| c < ' ' || c == '"' || c == '\\') {
        f.write_str(&rest[..at])?;
        let c = rest.as_bytes()[at];
        match c {
            b'"' => f.write_str("\\\"")?,
            b'\\' => f.write_str("\\\\")?,
            b'\n' => f.write_str("\\n")?,
            b'\r' => f.write_str("\\r")?,
            b'\t' => f.write_str("\\t")?,
            0x08 => f.write_str("\\b")?,
            0x0c => f.write_str("\\f")?,
            _ => write!(f, "\\u{c:04x}")?,
        }
        rest = &rest[at + 1..];
    }
    f.write_str(rest)?;
    f.write_char('"')
}

/// A float as serde_json writes it (NaN and infinities as `null`), without an
/// allocation.
struct JsonNumber(f64);

impl fmt::Display for JsonNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 40];
        let mut rest = &mut buf[..];
        serde_json::to_writer(&mut rest, &self.0).map_err(|_| fmt::Error)?;
        let written = 40 - rest.len();
        f.write_str(std::str::from_utf8(&buf[..written]).map_err(|_| fmt::Error)?)
    }
}

/// The current time as tracing-subscriber's `SystemTime` writes it
/// (`2026-11-24T00:11:47.229043Z`).
fn write_timestamp(w: &mut Writer<'_>) -> fmt::Result {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    SECOND.with_borrow_mut(|(second, text)| {
        if *second != now.as_secs() {
            *second = now.as_secs();
            text.clear();
            write_second(text, now.as_secs())?;
        }
        write!(w, "{text}.{:06}Z", now.subsec_micros())
    })
}

/// `YYYY-MM-DDTHH:MM:SS` of a Unix time (UTC).
fn write_second(w: &mut impl fmt::Write, unix: u64) -> fmt::Result {
    let (days, secs) = ((unix / 86_400) as i64, unix % 86_400);
    let (year, month, day) = civil_from_days(days);
    write!(
        w,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    #[test]
    fn dates_are_the_calendar_s() {
        for (unix, text) in [
            (0, "1970-01-01T00:00:00"),
            (951_782_400, "2000-02-29T00:00:00"),
            (1_709_251_199, "2024-02-29T23:59:59"),
            (1_795_479_107, "2026-11-24T00:11:47"),
            (4_107_542_400, "2100-03-01T00:00:00"),
        ] {
            let mut out = String::new();
            write_second(&mut out, unix).unwrap();
            assert_eq!(out, text, "{unix}");
        }
    }

    /// Lines written, for a test to read back.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl MakeWriter<'_> for Lines {
        type Writer = Self;
        fn make_writer(&self) -> Self {
            self.clone()
        }
    }

    /// Access lines of every kind, other lines, and lines in other spans.
    fn log_some() {
        let span = tracing::info_span!("request", request_id = %"0123abcd000000000005");
        span.in_scope(|| {
            tracing::info!(
                target: ACCESS,
                method = %http::Method::POST,
                route = "POST /v2/model-center/tasks",
                status = 200u16,
                key = Some("bench"),
                model = Some("se\"ed\\ance\n-1\u{1b}é"),
                provider = None::<&str>,
                latency_ms = 1.239_f64,
                upstream_ms = Some(0.000_01_f64),
                error = Some("rate_limited"),
                "request"
            );
            tracing::info!(target: ACCESS, status = 404u16, n = -3i64, big = 1e21_f64, whole = 2.0_f64, ok = true, "request");
            tracing::info!(target: ACCESS, nan = f64::NAN, list = ?[1, 2], "request");
            tracing::warn!(x = 1, "another line");
            let error = std::io::Error::other("disk \"full\"");
            let error: &(dyn std::error::Error + 'static) = &error;
            tracing::warn!(x = 1, error, "a line with an error");
        });
        tracing::info!(target: ACCESS, status = 401u16, "request");
        let outer = tracing::info_span!(
            "outer",
            a = 1,
            s = "q\"uo\nte é",
            d = %"shown",
            no = None::<u8>,
            f = 0.5,
            yes = true
        );
        outer.in_scope(|| {
            let inner = tracing::info_span!("request", request_id = 7);
            inner.in_scope(|| tracing::info!(target: ACCESS, status = 200u16, "request"));
        });
        let bare = tracing::info_span!("request");
        bare.in_scope(|| tracing::info!(target: ACCESS, status = 200u16, "request"));
        let raw = tracing::info_span!("request", r#type = "raw", message = "m");
        raw.in_scope(|| tracing::info!(target: ACCESS, status = 200u16, "request"));
    }

    /// A formatter that counts the events handed to it.
    struct Counted<F>(F, Arc<AtomicUsize>);

    impl<S, N, F> FormatEvent<S, N> for Counted<F>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
        F: FormatEvent<S, N>,
    {
        fn format_event(
            &self,
            ctx: &FmtContext<'_, S, N>,
            writer: Writer<'_>,
            event: &Event<'_>,
        ) -> fmt::Result {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.format_event(ctx, writer, event)
        }
    }

    /// What `log` writes through tracing-subscriber's own formatter of `style`
    /// (`ours` false) or through [`AccessLine`] and [`PlainFields`] in front of it;
    /// `handed_on` counts the events [`AccessLine`] hands to tracing-subscriber's.
    fn written(style: Style, ours: bool, handed_on: &Arc<AtomicUsize>, log: &dyn Fn()) -> String {
        let counted = |inner| Counted(inner, handed_on.clone());
        let lines = Lines::default();
        let builder = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_ansi(false);
        let dispatch: tracing::Dispatch = match (style, ours) {
            (Style::Text, false) => builder.into(),
            (Style::Text, true) => {
                let inner = tracing_subscriber::fmt::format::Format::default();
                builder
                    .fmt_fields(PlainFields::default())
                    .event_format(AccessLine::new(counted(inner), style))
                    .into()
            }
            (Style::Json, false) => builder.json().flatten_event(true).into(),
            (Style::Json, true) => {
                let builder = builder.json().flatten_event(true);
                let inner = tracing_subscriber::fmt::format::Format::default()
                    .json()
                    .flatten_event(true);
                builder
                    .event_format(AccessLine::new(Counted(inner, handed_on.clone()), style))
                    .into()
            }
        };
        tracing::dispatcher::with_default(&dispatch, log);
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    /// What tracing-subscriber's own formatter and [`AccessLine`] write for the same
    /// events, timestamps cut out, and how many events [`AccessLine`] handed on.
    fn both(style: Style) -> (String, String, usize) {
        let handed_on = Arc::new(AtomicUsize::new(0));
        let run = |ours: bool| {
            let text = written(style, ours, &handed_on, &log_some);
            assert_eq!(text.lines().count(), 9, "{ours}:\n{text}");
            text.lines().map(cut_time).collect::<Vec<_>>().join("\n")
        };
        let (theirs, ours) = (run(false), run(true));
        (theirs, ours, handed_on.load(Ordering::SeqCst))
    }

    /// A line with its timestamp (`2026-11-24T00:11:47.229043Z`, at the start or as
    /// the JSON `timestamp`) replaced by `<time>`.
    fn cut_time(line: &str) -> String {
        let at = if line.starts_with('{') { 14 } else { 0 };
        let time = &line[at..at + 27];
        let shape: String = time
            .chars()
            .map(|c| if c.is_ascii_digit() { '0' } else { c })
            .collect();
        assert_eq!(shape, "0000-00-00T00:00:00.000000Z", "{line}");
        format!("{}<time>{}", &line[..at], &line[at + 27..])
    }

    #[test]
    fn text_lines_are_tracing_subscriber_s() {
        let (theirs, ours, handed_on) = both(Style::Text);
        assert_eq!(ours, theirs);
        // The warnings, and the access lines outside a span, in two spans, in a span
        // without fields and in one with two.
        assert_eq!(handed_on, 6);
        assert!(ours.contains("  INFO request{request_id=0123abcd000000000005}: mediagate::access: request method=POST route=\"POST /v2/model-center/tasks\" status=200"), "{ours}");
        assert!(
            ours.contains("outer{a=1 s=\"q\\\"uo\\nte é\" d=shown f=0.5 yes=true}"),
            "{ours}"
        );
    }

    #[test]
    fn json_lines_are_tracing_subscriber_s() {
        let (theirs, ours, handed_on) = both(Style::Json);
        assert_eq!(ours, theirs);
        assert_eq!(handed_on, 6);
        let first: serde_json::Value = serde_json::from_str(ours.lines().next().unwrap()).unwrap();
        assert_eq!(first["span"]["request_id"], "0123abcd000000000005");
        assert_eq!(first["latency_ms"], 1.239);
    }

    /// Found by the proptest below: tracing-subscriber spells out a message's
    /// terminal controls (ESC, BEL, C1), in text only.
    #[test]
    fn a_message_s_terminal_controls_are_written_as_tracing_subscriber_writes_them() {
        let log = || {
            let span = tracing::info_span!("request", request_id = 1);
            span.in_scope(|| {
                tracing::info!(target: ACCESS, status = 200u16, "a\u{1b}[31m\u{7}b\u{9b}c\u{7f}");
            });
        };
        for style in [Style::Text, Style::Json] {
            let handed_on = Arc::new(AtomicUsize::new(0));
            let theirs = written(style, false, &handed_on, &log);
            let ours = written(style, true, &handed_on, &log);
            assert_eq!(cut_times(&ours), cut_times(&theirs));
            assert_eq!(handed_on.load(Ordering::SeqCst), 0);
        }
    }

    /// Every `YYYY-MM-DDTHH:MM:SS.ffffffZ` in `text` replaced by `<time>`: the two
    /// formatters read the clock apart, so the times are cut out of both alike.
    fn cut_times(text: &str) -> String {
        const SHAPE: &[u8] = b"0000-00-00T00:00:00.000000Z";
        let bytes = text.as_bytes();
        let is_time = |at: usize| {
            bytes.get(at..at + SHAPE.len()).is_some_and(|t| {
                t.iter().zip(SHAPE).all(|(&b, &s)| {
                    if s == b'0' {
                        b.is_ascii_digit()
                    } else {
                        b == s
                    }
                })
            })
        };
        let (mut out, mut at, mut from) = (String::new(), 0, 0);
        while at < bytes.len() {
            if is_time(at) {
                out.push_str(&text[from..at]);
                out.push_str("<time>");
                at += SHAPE.len();
                from = at;
            } else {
                at += 1;
            }
        }
        out.push_str(&text[from..]);
        out
    }

    /// Text as fields carry it: printable, quotes and backslashes, controls, escapes.
    fn any_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            "[ -~]{0,16}",
            "\\PC{0,12}",
            "[\\x00-\\x1f\\x7f \"\\\\a\u{e9}\u{1b}\u{2028}\u{85}\u{9b}]{0,10}",
        ]
    }

    /// One access line's values, and where it is logged.
    #[derive(Debug, Clone)]
    struct Access {
        /// 0: the request span's id as `%` (Display), 1: as `&str`, 2: as a number.
        id_kind: u8,
        id: String,
        number: u64,
        message: String,
        method: String,
        route: String,
        status: u16,
        key: Option<String>,
        latency_ms: f64,
        upstream_ms: Option<f64>,
        delta: i64,
        ok: bool,
        error: Option<String>,
        /// 0: in the request span (the line written here), 1: outside any span, 2: in
        /// a span inside another, 3: at WARN (all three left to tracing-subscriber).
        place: u8,
        /// The short line (status alone) instead of the full one.
        short: bool,
    }

    fn any_access() -> impl proptest::strategy::Strategy<Value = Access> {
        use proptest::prelude::*;
        let ids = (0..3u8, any_text(), any::<u64>(), any_text());
        let fields = (
            any_text(),
            any_text(),
            any::<u16>(),
            proptest::option::of(any_text()),
            any::<f64>(),
            proptest::option::of(any::<f64>()),
            any::<i64>(),
            any::<bool>(),
            proptest::option::of(any_text()),
        );
        let place = prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)];
        (ids, fields, place, any::<bool>()).prop_map(|(ids, fields, place, short)| {
            let (id_kind, id, number, message) = ids;
            let (method, route, status, key, latency_ms, upstream_ms, delta, ok, error) = fields;
            Access {
                id_kind,
                id,
                number,
                message,
                method,
                route,
                status,
                key,
                latency_ms,
                upstream_ms,
                delta,
                ok,
                error,
                place,
                short,
            }
        })
    }

    impl Access {
        fn log(&self) {
            match self.place {
                0 => self.span().in_scope(|| self.event()),
                1 => self.event(),
                2 => {
                    // Made inside `outer`, so that `outer` is its parent.
                    let outer = tracing::info_span!("outer", id = self.id.as_str());
                    outer.in_scope(|| self.span().in_scope(|| self.event()));
                }
                _ => self.span().in_scope(|| {
                    tracing::warn!(target: ACCESS, status = self.status, "{}", self.message);
                }),
            }
        }

        fn span(&self) -> tracing::Span {
            match self.id_kind {
                0 => tracing::info_span!("request", request_id = %self.id),
                1 => tracing::info_span!("request", request_id = self.id.as_str()),
                _ => tracing::info_span!("request", request_id = self.number),
            }
        }

        fn event(&self) {
            if self.short {
                return tracing::info!(target: ACCESS, status = self.status, "request");
            }
            tracing::info!(
                target: ACCESS,
                method = %self.method,
                route = self.route.as_str(),
                status = self.status,
                key = ?self.key.as_deref(),
                latency_ms = self.latency_ms,
                upstream_ms = ?self.upstream_ms,
                delta = self.delta,
                ok = self.ok,
                error = ?self.error.as_deref(),
                "{}",
                self.message
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn generated_access_lines_are_tracing_subscriber_s(
            access in any_access(),
            json in proptest::prelude::any::<bool>(),
        ) {
            let style = if json { Style::Json } else { Style::Text };
            let handed_on = Arc::new(AtomicUsize::new(0));
            let theirs = written(style, false, &handed_on, &|| access.log());
            let ours = written(style, true, &handed_on, &|| access.log());
            proptest::prop_assert!(!theirs.is_empty());
            proptest::prop_assert_eq!(cut_times(&ours), cut_times(&theirs));
            // The line in the request span is this module's own, not handed on.
            let handed_on = handed_on.load(Ordering::SeqCst);
            proptest::prop_assert_eq!(handed_on == 0, access.place == 0, "{}", handed_on);
        }
    }
}
