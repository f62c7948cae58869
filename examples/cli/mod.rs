//! The command line of the example upstreams (`fast_upstream`, `fault_upstream`):
//! `--name value` pairs.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::str::FromStr;

/// The word after `name`, when it is given.
pub fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// The number after `name`, or `default` when it is not given.
pub fn number<T: FromStr<Err: Debug>>(args: &[String], name: &str, default: T) -> T {
    arg(args, name).map_or(default, |v| v.parse().expect(name))
}

/// `--listen ADDR:PORT`, by default a free port of 127.0.0.1.
pub fn listen(args: &[String]) -> SocketAddr {
    arg(args, "--listen")
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()
        .expect("--listen ADDR:PORT")
}
