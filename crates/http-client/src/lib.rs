//! kvfabric's HTTP client agent: [`agent`] builds a ureq agent whose requests to an IP-literal
//! host (`http://127.0.0.1:8080`, `http://[::1]:8080`: every node URL kvfabric writes) skip
//! name resolution, and whose small requests leave in one write ([`joined`]).
//!
//! Why the resolver: ureq resolves the host on every call, even one that reuses a pooled
//! connection, and when the call has a deadline (`timeout_global`, `timeout_per_call`,
//! `timeout_resolve`) its default resolver runs `getaddrinfo` on a new thread so that it can
//! give up on time. That is a thread created per request (it exits once the lookup answers):
//! `kvfabric bench directory` measured one `clone3`, `mmap`, `munmap` and `madvise` per
//! registration in its client (13,286 of each in 10 s).
//! An IP literal needs no lookup, so it is answered in place; a host name still goes to ureq's
//! own resolver, deadline included.

use std::net::{IpAddr, SocketAddr};

use ureq::config::{Config, IpFamily};
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{Connector, DefaultConnector, NextTimeout};
use ureq::Agent;

pub mod joined;

/// An agent with `config` whose IP-literal hosts are resolved in place and whose requests'
/// heads and small bodies are joined into one write (see the crate docs).
pub fn agent(config: Config) -> Agent {
    let connector = DefaultConnector::default().chain(joined::JoinWrites);
    Agent::with_parts(config, connector, LiteralFirst::default())
}

/// Answers IP-literal hosts itself and hands every other host to ureq's default resolver.
#[derive(Debug, Default)]
pub struct LiteralFirst {
    names: DefaultResolver,
}

impl Resolver for LiteralFirst {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        match literal(uri).filter(|a| wanted(config.ip_family(), a)) {
            Some(addr) => {
                let mut out = self.empty();
                out.push(addr);
                Ok(out)
            }
            None => self.names.resolve(uri, config, timeout),
        }
    }
}

/// The socket address of `uri` when its host is an IP literal (the port given or the
/// scheme's default).
fn literal(uri: &Uri) -> Option<SocketAddr> {
    let host = uri.host()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip: IpAddr = host.parse().ok()?;
    let port = uri.port_u16().or_else(|| match uri.scheme_str()? {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some(SocketAddr::new(ip, port))
}

/// Whether `config`'s IP family admits `addr`.
fn wanted(family: IpFamily, addr: &SocketAddr) -> bool {
    match family {
        IpFamily::Any => true,
        IpFamily::Ipv4Only => addr.is_ipv4(),
        IpFamily::Ipv6Only => addr.is_ipv6(),
    }
}

#[cfg(test)]
mod tests;
