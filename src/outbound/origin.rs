//! Where a provider's requests may go. Our headers (the key among them) only ever go to
//! the provider's own origin; a link or redirect the upstream hands us may not steer
//! the gateway into a private network: only the provider's own origin, and the private
//! networks its block lists in `allow_private_networks`, are reachable on its say-so.
//!
//! Two checks use the one policy ([`Reach`]): [`Origin::may_reach`] refuses a URL whose
//! host is written as an internal address before anything is sent, and the upstream
//! client's connector ([`super::client`]) judges the *resolved* address of every
//! connection that is not to the provider's own origin, so numeric forms
//! (`2852039166`, `0x7f000001`, `127.1`), `localhost.` and names that resolve to
//! private addresses (DNS rebinding included: the address checked is the one
//! connected to) are refused as well.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use http::uri::{Authority, Scheme};
use http::{HeaderMap, Uri};

pub use crate::config::Network;

/// A provider's base URL, parsed once, with the headers that go only to it.
#[derive(Debug)]
pub struct Origin {
    /// The base URL without a trailing `/`; relative paths are appended to it.
    pub base: String,
    uri: Uri,
    /// Our headers for this provider (auth, static headers): never sent elsewhere.
    pub headers: HeaderMap,
    reach: Arc<Reach>,
}

impl Origin {
    /// Parse `base_url`; only `http://` and `https://` URLs with a host are accepted.
    pub fn parse(base_url: &str, headers: HeaderMap) -> Result<Self, String> {
        let base = base_url.trim_end_matches('/').to_string();
        match base.parse::<Uri>() {
            Ok(uri)
                if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() =>
            {
                let reach = Arc::new(Reach {
                    scheme: uri.scheme().cloned(),
                    authority: uri.authority().cloned(),
                    allowed: Vec::new(),
                });
                Ok(Self {
                    base,
                    uri,
                    headers,
                    reach,
                })
            }
            _ => Err("must be an http:// or https:// URL, or builtin:simulator".into()),
        }
    }

    /// The private networks (CIDR, or single addresses) this provider's links may
    /// lead into, besides its own origin.
    pub fn allow_private_networks(mut self, networks: Vec<Network>) -> Self {
        self.reach = Arc::new(Reach {
            allowed: networks,
            ..Reach::clone(&self.reach)
        });
        self
    }

    /// The host, for redaction.
    pub fn host(&self) -> &str {
        self.uri.host().unwrap_or_default()
    }

    /// Whether `to` is on the provider's own scheme, host and port.
    pub fn same_origin(&self, to: &Uri) -> bool {
        self.reach.is_origin(to)
    }

    /// Whether a link or redirect the upstream handed us may be followed, as far as
    /// can be told from the URL as written (the connector judges the resolved address).
    pub fn may_reach(&self, to: &Uri) -> bool {
        self.reach.may_reach(to)
    }

    /// The policy, for the connector.
    pub fn reach(&self) -> Arc<Reach> {
        self.reach.clone()
    }
}

/// Which addresses a provider's connections may go to: anywhere public; its own
/// origin whatever it resolves to; private addresses only in the listed networks.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    scheme: Option<Scheme>,
    authority: Option<Authority>,
    allowed: Vec<Network>,
}

impl Reach {
    /// For connections with no origin of their own (webhook deliveries): public
    /// addresses, and private ones only in `allowed`.
    pub fn without_origin(allowed: Vec<Network>) -> Self {
        Self {
            allowed,
            ..Self::default()
        }
    }

    /// Whether `to` is the provider's own origin (scheme, host and port).
    pub fn is_origin(&self, to: &Uri) -> bool {
        self.scheme.is_some()
            && self.scheme.as_ref() == to.scheme()
            && self.authority.as_ref() == to.authority()
    }

    /// Whether a connection to `ip` may be made for a URL that is not the origin.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        !is_internal(ip) || self.allowed.iter().any(|n| n.contains(ip))
    }

    /// Whether `to` may be reached, as far as can be told from the URL as written.
    pub fn may_reach(&self, to: &Uri) -> bool {
        if self.is_origin(to) {
            return true;
        }
        let Some(host) = to.host() else { return false };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let lower = host.trim_end_matches('.').to_ascii_lowercase();
        if lower == "localhost" || lower.ends_with(".localhost") {
            return self.allows(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        match host.parse::<IpAddr>() {
            Ok(ip) => self.allows(ip),
            // A name: judged by what it resolves to, when connecting.
            Err(_) => true,
        }
    }
}

/// An address of this machine or of a private network: unspecified and `0/8`,
/// loopback, RFC 1918, shared (`100.64/10`), link-local, multicast, reserved and
/// broadcast; in IPv6 also unique-local, link- and site-local, multicast, and every
/// form that embeds an IPv4 address (mapped, compatible, NAT64 `64:ff9b::/96`, 6to4),
/// judged by that address.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_internal_v4(ip),
        IpAddr::V6(ip) => is_internal_v6(ip),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    a == 0 // "this network", 0.0.0.0 included
        || ip.is_loopback()
        || ip.is_private()
        || (a == 100 && (b & 0xc0) == 64) // shared address space, 100.64/10
        || ip.is_link_local()
        || ip.is_multicast()
        || a >= 240 // reserved, broadcast
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (b & 0xfe) == 18) // benchmarking, 198.18/15
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = ip.to_ipv4() {
        // IPv4-mapped `::ffff:a.b.c.d` and IPv4-compatible `::a.b.c.d` (`::1` and `::`
        // included: they read as 0.0.0.1 and 0.0.0.0, both in 0/8).
        return is_internal_v4(v4);
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return is_internal_v4(embedded(s[6], s[7])); // NAT64, 64:ff9b::/96
    }
    if s[0] == 0x2002 {
        return is_internal_v4(embedded(s[1], s[2])); // 6to4
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || (s[0] & 0xfe00) == 0xfc00 // unique local, fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link local, fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site local (deprecated), fec0::/10
        || (s[0] & 0xff00) == 0xff00 // multicast
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

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_public_upstream_cannot_steer_us_into_a_private_network() {
        let public = origin("https://api.example");
        for inside in [
            "http://169.254.169.254/latest/meta-data",
            "http://127.0.0.1:9090/metrics",
            "http://localhost/x",
            "http://localhost./x",
            "http://a.localhost/x",
            "http://10.0.0.5/x",
            "http://100.100.100.200/x",
            "http://[::1]/x",
            "http://[fd00::1]/x",
            "http://[fe80::1]/x",
            "http://[::ffff:10.0.0.1]/x",
            "http://[64:ff9b::a9fe:a9fe]/x",
            "http://0.0.0.0/x",
            "http://224.0.0.1/x",
        ] {
            assert!(!public.may_reach(&uri(inside)), "{inside}");
        }
        assert!(public.may_reach(&uri("https://cdn.example/v.mp4")));
        assert!(public.may_reach(&uri("http://8.8.8.8/v.mp4")));
        assert!(public.may_reach(&uri("https://api.example/own")));
    }

    #[test]
    fn a_provider_inside_reaches_its_own_origin_and_listed_networks_only() {
        let inside = origin("http://10.1.2.3:8000");
        assert!(inside.may_reach(&uri("http://10.1.2.3:8000/file")));
        assert!(!inside.may_reach(&uri("http://10.1.2.3:22/file")));
        assert!(!inside.may_reach(&uri("http://10.9.9.9/file")));
        assert!(!inside.may_reach(&uri("http://127.0.0.1/file")));
        let listed = origin("http://10.1.2.3:8000")
            .allow_private_networks(vec!["10.9.0.0/16".parse().unwrap()]);
        assert!(listed.may_reach(&uri("http://10.9.9.9/file")));
        assert!(!listed.may_reach(&uri("http://10.8.9.9/file")));
        assert!(!listed.may_reach(&uri("http://169.254.169.254/file")));
    }

    #[test]
    fn every_private_form_is_internal() {
        for inside in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.0.1",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "169.254.169.254",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "::",
            "::1",
            "fc00::1",
            "fdff::1",
            "fe80::1",
            "febf::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
        ] {
            assert!(is_internal(ip(inside)), "{inside}");
        }
        for outside in [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "169.253.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(!is_internal(ip(outside)), "{outside}");
        }
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
