//! A notices URL must not reach Inlet itself: every notice would arrive as a webhook of
//! one of its own sources, and the notice about that event's delivery after it, without
//! end (1,163 events in 13 s before a process was killed). What can be told from the
//! configuration alone is refused: a URL whose host is the address a listener binds, or
//! a loopback or any-address form of it, on its port. A name that resolves to Inlet, or a
//! listener on port 0, cannot be seen here; the mark every notice's delivery carries stops
//! such a loop after one notice ([`super::settings::MARKER_HEADER`]).

use crate::error::ConfigError;
use std::net::{IpAddr, SocketAddr};

/// Refuses `url` (the key `notices.url`) when it reaches one of `listeners`, each a key
/// (`server.bind`) and the address it binds as written.
pub fn refuse_own_listeners(url: &str, listeners: &[(&str, &str)]) -> Result<(), ConfigError> {
    let Some((host, port)) = target(url) else {
        return Ok(());
    };
    for (key, bind) in listeners {
        if reaches(&host, port, bind) {
            return Err(ConfigError::new(
                "notices.url",
                format!(
                    "reaches Inlet's own listener ({key} = \"{bind}\"): every notice would \
                     arrive as one of Inlet's webhooks; send notices to another service"
                ),
            ));
        }
    }
    Ok(())
}

/// Where a URL connects: its host (an address, or a name) and its port.
enum Host {
    Address(IpAddr),
    /// `localhost` or a name under `.localhost`: always the loopback.
    Loopback,
    /// Any other name: what it resolves to is not the configuration's to know.
    Name,
}

/// The host and port `url` connects to, when it is a URL.
fn target(url: &str) -> Option<(Host, u16)> {
    let url = reqwest::Url::parse(url).ok()?;
    let port = url.port_or_known_default()?;
    // The URL parser writes an IPv6 address in brackets, every address canonically.
    let name = url.host_str()?;
    let host = match name
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        Ok(ip) => Host::Address(ip.to_canonical()),
        Err(_) if is_localhost(name) => Host::Loopback,
        Err(_) => Host::Name,
    };
    Some((host, port))
}

fn is_localhost(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// Whether a connection to `host`:`port` reaches a listener bound to `bind` (an address
/// and port, or `localhost:port`). A listener on any address takes connections to every
/// local address: the loopback ones and the any-address itself are the ones the
/// configuration can name; one on a loopback address takes them on the loopback.
fn reaches(host: &Host, port: u16, bind: &str) -> bool {
    let Some((bound, bound_port)) = listener(bind) else {
        return false;
    };
    if bound_port != port || bound_port == 0 {
        return false;
    }
    let local = |ip: &IpAddr| ip.is_loopback() || ip.is_unspecified();
    match (host, bound) {
        (Host::Name, _) => false,
        (Host::Loopback, bound) => local(&bound),
        (Host::Address(ip), bound) if bound.is_unspecified() => local(ip),
        (Host::Address(ip), bound) if bound.is_loopback() => local(ip),
        (Host::Address(ip), bound) => *ip == bound,
    }
}

/// The address and port `bind` listens on; `localhost:port` as the loopback.
fn listener(bind: &str) -> Option<(IpAddr, u16)> {
    if let Ok(address) = bind.parse::<SocketAddr>() {
        return Some((address.ip().to_canonical(), address.port()));
    }
    let (name, port) = bind.rsplit_once(':')?;
    let loopback = IpAddr::from([127, 0, 0, 1]);
    is_localhost(name).then_some((loopback, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str, bind: &str) -> bool {
        refuse_own_listeners(url, &[("server.bind", bind)]).is_err()
    }

    #[test]
    fn a_url_on_a_listeners_address_or_its_local_forms_is_refused() {
        for (url, bind) in [
            ("http://127.0.0.1:8080/webhooks/x", "127.0.0.1:8080"),
            ("http://localhost:8080/webhooks/x", "127.0.0.1:8080"),
            ("http://LOCALHOST.:8080/x", "127.0.0.1:8080"),
            ("http://127.0.0.5:8080/x", "127.0.0.1:8080"),
            ("http://[::1]:8080/x", "0.0.0.0:8080"),
            ("http://0.0.0.0:8080/x", "[::]:8080"),
            ("http://[::ffff:127.0.0.1]:8080/x", "127.0.0.1:8080"),
            ("http://localhost/x", "0.0.0.0:80"),
            ("https://10.0.0.5/x", "10.0.0.5:443"),
            ("http://127.0.0.1:9000/x", "localhost:9000"),
        ] {
            assert!(refused(url, bind), "{url} beside {bind}");
        }
    }

    #[test]
    fn another_port_address_or_name_is_not() {
        for (url, bind) in [
            ("http://127.0.0.1:8081/x", "127.0.0.1:8080"),
            ("http://127.0.0.1:8080/x", "10.0.0.5:8080"),
            ("http://10.0.0.6:8080/x", "10.0.0.5:8080"),
            ("https://hooks.example.com:8080/x", "0.0.0.0:8080"),
            ("http://127.0.0.1:8080/x", "127.0.0.1:0"),
            ("nats://127.0.0.1:8080", "not an address"),
        ] {
            assert!(!refused(url, bind), "{url} beside {bind}");
        }
        let error = refuse_own_listeners(
            "http://127.0.0.1:9090/x",
            &[
                ("server.bind", "127.0.0.1:8080"),
                ("admin.bind", "127.0.0.1:9090"),
            ],
        )
        .expect_err("the admin listener");
        assert_eq!(error.key, "notices.url");
        assert!(error.to_string().contains("admin.bind"), "{error}");
    }
}
