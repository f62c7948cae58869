//! Address blocks in the configuration (`10.0.0.0/8`, `fd00::/8`, single addresses):
//! the private networks a provider's links may reach, the trusted proxies.

use std::net::IpAddr;

/// An address block, `10.0.0.0/8` or `fd00::/8`; a bare address is a block of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Network {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not an address or a CIDR block (`10.0.0.0/8`)");
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p.parse::<u8>().map_err(|_| bad())?)),
            None => (s, None),
        };
        let addr = addr.parse::<IpAddr>().map_err(|_| bad())?.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(bad());
        }
        Ok(Self { addr, prefix })
    }
}

impl Network {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            _ => false,
        }
    }
}

/// Whether the first `bits` bits of `a` and `b` are equal.
fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (whole, rest) = (usize::from(bits / 8), bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_parse_and_match_by_prefix() {
        let net: Network = "10.0.0.0/8".parse().unwrap();
        assert!(net.contains(ip("10.255.1.1")));
        assert!(net.contains(ip("::ffff:10.1.1.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        let one: Network = "127.0.0.1".parse().unwrap();
        assert!(one.contains(ip("127.0.0.1")));
        assert!(!one.contains(ip("127.0.0.2")));
        let odd: Network = "100.64.0.0/10".parse().unwrap();
        assert!(odd.contains(ip("100.127.0.1")));
        assert!(!odd.contains(ip("100.128.0.1")));
        let v6: Network = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")));
        assert!(!v6.contains(ip("fc00::1")));
        for bad in ["", "10.0.0.0/33", "::/129", "example.com", "10.0.0.0/x"] {
            assert!(bad.parse::<Network>().is_err(), "{bad}");
        }
    }
}
