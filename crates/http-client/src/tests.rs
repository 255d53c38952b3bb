//! The resolver's answers, and an agent's calls through it.

use std::time::Duration;

use ureq::unversioned::transport::time::Duration as Budget;
use ureq::Timeout;

use super::*;

fn resolve(url: &str, family: IpFamily, budget: Budget) -> Result<Vec<SocketAddr>, ureq::Error> {
    let uri: Uri = url.parse().unwrap();
    let config = Config::builder().ip_family(family).build();
    let timeout = NextTimeout {
        after: budget,
        reason: Timeout::Resolve,
        ..NextTimeout::default()
    };
    LiteralFirst::default()
        .resolve(&uri, &config, timeout)
        .map(|a| a.to_vec())
}

#[test]
fn ip_literals_resolve_in_place_even_with_no_time_left() {
    // A spent budget: ureq's own resolver would hand the lookup to a thread and time out.
    let spent = Budget::Exact(Duration::ZERO);
    let cases = [
        ("http://127.0.0.1:8080/v1/blocks", "127.0.0.1:8080"),
        ("http://10.201.0.2/metrics", "10.201.0.2:80"),
        ("https://192.0.2.7/", "192.0.2.7:443"),
        ("http://[::1]:9000/x", "[::1]:9000"),
    ];
    for (url, want) in cases {
        let got = resolve(url, IpFamily::Any, spent).unwrap();
        assert_eq!(got, vec![want.parse::<SocketAddr>().unwrap()], "{url}");
    }
}

#[test]
fn names_and_unwanted_families_go_to_ureqs_resolver() {
    let uri: Uri = "http://localhost:8080/".parse().unwrap();
    assert_eq!(literal(&uri), None);
    // localhost resolves through getaddrinfo to loopback, port kept.
    let got = resolve(
        "http://localhost:8080/",
        IpFamily::Ipv4Only,
        Budget::NotHappening,
    )
    .unwrap();
    assert!(
        got.iter().all(|a| a.ip().is_loopback() && a.port() == 8080),
        "{got:?}"
    );
    // An IPv6 literal under an IPv4-only config is not answered in place: ureq's resolver
    // filters it out and says so.
    let e = resolve(
        "http://[::1]:9000/",
        IpFamily::Ipv4Only,
        Budget::NotHappening,
    )
    .unwrap_err();
    assert!(matches!(e, ureq::Error::HostNotFound), "{e:?}");
}
