//! Command-line values in the forms OpenKruise's Go binaries accept, shared by kruise-manager and
//! kruise-daemon so that an OpenKruise chart's arguments (`--metrics-addr=:8080`, `--addr=:10221`) mean
//! the same to both.

use std::net::SocketAddr;

/// A listen address as Go programs write it: `HOST:PORT`, or `:PORT` for every interface.
pub fn parse_listen_addr(value: &str) -> Result<SocketAddr, String> {
    let full = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_string(),
    };
    full.parse()
        .map_err(|error| format!("{value:?} is not HOST:PORT or :PORT ({error})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_in_go_and_rust_forms() {
        let cases = [
            (":10221", Some("0.0.0.0:10221")),
            (":8080", Some("0.0.0.0:8080")),
            ("127.0.0.1:8000", Some("127.0.0.1:8000")),
            ("0.0.0.0:9876", Some("0.0.0.0:9876")),
            ("[::1]:8080", Some("[::1]:8080")),
            ("8080", None),
            (":", None),
            ("localhost:8080", None),
            (":99999", None),
        ];
        for (value, want) in cases {
            let got = parse_listen_addr(value).ok().map(|a| a.to_string());
            assert_eq!(got.as_deref(), want, "{value}");
        }
    }
}
