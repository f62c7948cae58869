//! How the client reached us, to form absolute content URLs when the provider sets no
//! `content.public_base_url`: `https` for a request on the gateway's own TLS listener,
//! else `X-Forwarded-Proto` (`http`/`https`, default `http`); the `Host` header (or the
//! HTTP/2 authority), never one with userinfo (`user@host`). Only the asking client sees
//! the result, so what it sends is only reflected back to itself — but a client that
//! follows the link sends its key there, so a link never downgrades TLS.

use http::request::Parts;
use http::{HeaderMap, header};

pub(super) struct PublicBase<'r> {
    headers: &'r HeaderMap,
    authority: Option<&'r http::uri::Authority>,
    tls: bool,
}

impl<'r> PublicBase<'r> {
    /// Borrows the request; nothing is parsed unless a content URL is formed.
    pub(super) fn of(req: &'r Parts) -> Self {
        Self {
            headers: &req.headers,
            authority: req.uri.authority(),
            tls: req
                .extensions
                .get::<crate::edge::Connection>()
                .is_some_and(|c| c.tls),
        }
    }

    /// `scheme://host` as the client reached the gateway; `None` when nothing names
    /// it (the content link is then the path alone).
    pub(super) fn as_seen_by_client(&self) -> Option<String> {
        let proto = match self
            .headers
            .get("x-forwarded-proto")
            .filter(|_| !self.tls)
            .and_then(|v| v.to_str().ok())
            // The first proxy's view: `https, http` means the client used https.
            .and_then(|v| v.split(',').next())
        {
            Some(p) if p.trim().eq_ignore_ascii_case("https") => "https",
            _ if self.tls => "https",
            _ => "http",
        };
        let host = self
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| self.authority.map(|a| a.to_string()))
            // `user@host` would make a link that names another host to some readers.
            .filter(|h| !h.contains('@') && h.parse::<http::uri::Authority>().is_ok())?;
        Some(format!("{proto}://{host}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Endpoint;

    fn url(headers: &[(&str, &str)], configured: Option<&str>) -> String {
        url_on(false, headers, configured)
    }

    fn url_on(tls: bool, headers: &[(&str, &str)], configured: Option<&str>) -> String {
        let mut req = http::Request::builder().uri("/v1/alpha/videos/t");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let (mut parts, ()) = req.body(()).unwrap().into_parts();
        parts.extensions.insert(crate::edge::Connection {
            peer: ([127, 0, 0, 1], 1).into(),
            tls,
            client: [127, 0, 0, 1].into(),
        });
        let client_base = || PublicBase::of(&parts).as_seen_by_client();
        crate::lifecycle::links::content_link(configured, client_base, Endpoint::AlphaVideos, "t")
    }

    #[test]
    fn on_the_tls_listener_links_are_https_and_userinfo_is_refused() {
        assert_eq!(
            url_on(true, &[("host", "gw.example:8443")], None),
            "https://gw.example:8443/v1/alpha/videos/t/content"
        );
        // A forwarded `http` cannot downgrade a request that came over TLS.
        assert_eq!(
            url_on(
                true,
                &[("host", "gw.example"), ("x-forwarded-proto", "http")],
                None
            ),
            "https://gw.example/v1/alpha/videos/t/content"
        );
        for host in ["evil.example@gw.example", "user:pass@gw.example:8080"] {
            assert_eq!(url(&[("host", host)], None), "/v1/alpha/videos/t/content");
        }
    }

    #[test]
    fn formed_from_what_the_client_sent() {
        assert_eq!(
            url(&[("host", "gw.example:8080")], None),
            "http://gw.example:8080/v1/alpha/videos/t/content"
        );
        assert_eq!(
            url(
                &[("host", "gw.example"), ("x-forwarded-proto", "https, http")],
                None
            ),
            "https://gw.example/v1/alpha/videos/t/content"
        );
        assert_eq!(
            url(&[("host", "bad host")], None),
            "/v1/alpha/videos/t/content"
        );
        assert_eq!(
            url(&[("host", "ignored")], Some("https://media.example")),
            "https://media.example/v1/alpha/videos/t/content"
        );
    }
}
