//! Where a provider's requests may go. Our headers (the key among them) only ever go to
//! the provider's own origin; a link or redirect the upstream hands us may not steer
//! the gateway into a private network unless the provider itself lives in one.

use http::{HeaderMap, Uri};

/// A provider's base URL, parsed once, with the headers that go only to it.
#[derive(Debug, Default)]
pub struct Origin {
    /// The base URL without a trailing `/`; relative paths are appended to it.
    pub base: String,
    uri: Uri,
    /// Our headers for this provider (auth, static headers): never sent elsewhere.
    pub headers: HeaderMap,
}

impl Origin {
    /// Parse `base_url`; only `http://` and `https://` URLs with a host are accepted.
    pub fn parse(base_url: &str, headers: HeaderMap) -> Result<Self, String> {
        let base = base_url.trim_end_matches('/').to_string();
        match base.parse::<Uri>() {
            Ok(uri)
                if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() =>
            {
                Ok(Self { base, uri, headers })
            }
            _ => Err("must be an http:// or https:// URL, or builtin:simulator".into()),
        }
    }

    /// The host, for redaction.
    pub fn host(&self) -> &str {
        self.uri.host().unwrap_or_default()
    }

    /// Whether `to` is on the provider's own scheme, host and port.
    pub fn same_origin(&self, to: &Uri) -> bool {
        self.uri.scheme() == to.scheme() && self.uri.authority() == to.authority()
    }

    /// Whether a link or redirect the upstream handed us may be followed. An upstream
    /// on the public internet must not steer the gateway into its own network (cloud
    /// metadata, admin ports): loopback, private and link-local addresses are only
    /// reachable from a provider that is itself on one.
    pub fn may_reach(&self, to: &Uri) -> bool {
        self.same_origin(to) || !is_internal(to.host()) || is_internal(self.uri.host())
    }
}

/// A host that names this machine or a private network: `localhost`, loopback,
/// private (RFC 1918, unique-local), link-local or unspecified addresses. Names are
/// judged as written; a public name that resolves to a private address is not caught.
fn is_internal(host: Option<&str>) -> bool {
    use std::net::IpAddr;
    let Some(host) = host else { return true };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(IpAddr::V6(ip)) => {
            let first = ip.segments()[0];
            ip.is_loopback()
                || ip.is_unspecified()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link local
                || ip.to_ipv4_mapped().is_some_and(|v4| is_internal(Some(&v4.to_string())))
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(base: &str) -> Origin {
        Origin::parse(base, HeaderMap::new()).unwrap()
    }

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn a_public_upstream_cannot_steer_us_into_a_private_network() {
        let public = origin("https://api.example");
        for inside in [
            "http://169.254.169.254/latest/meta-data",
            "http://127.0.0.1:9090/metrics",
            "http://localhost/x",
            "http://a.localhost/x",
            "http://10.0.0.5/x",
            "http://[::1]/x",
            "http://[fd00::1]/x",
            "http://[fe80::1]/x",
            "http://[::ffff:10.0.0.1]/x",
            "http://0.0.0.0/x",
        ] {
            assert!(!public.may_reach(&uri(inside)), "{inside}");
        }
        assert!(public.may_reach(&uri("https://cdn.example/v.mp4")));
        assert!(public.may_reach(&uri("http://8.8.8.8/v.mp4")));
        assert!(public.may_reach(&uri("https://api.example/own")));
    }

    #[test]
    fn a_provider_inside_may_reach_its_neighbours() {
        let inside = origin("http://10.1.2.3:8000");
        assert!(inside.may_reach(&uri("http://10.9.9.9/file")));
        assert!(inside.may_reach(&uri("http://127.0.0.1/file")));
    }

    #[test]
    fn same_origin_means_scheme_host_and_port() {
        let o = origin("https://api.example/v1/");
        assert_eq!(o.base, "https://api.example/v1");
        assert!(o.same_origin(&uri("https://api.example/files/1")));
        assert!(!o.same_origin(&uri("http://api.example/files/1")));
        assert!(!o.same_origin(&uri("https://api.example:8443/files/1")));
        assert!(!o.same_origin(&uri("https://cdn.example/files/1")));
    }

    #[test]
    fn only_http_urls_with_a_host_are_origins() {
        for bad in ["ftp://x", "api.example", "", "https://"] {
            assert!(Origin::parse(bad, HeaderMap::new()).is_err(), "{bad}");
        }
    }
}
