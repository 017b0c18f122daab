//! Who may ask the ui anything. Every request must:
//!
//! - name this server in its `Host` header as the address it listens on and prints
//!   (`127.0.0.1:PORT`, `[::1]:PORT`): a page of another site that resolves its own name to
//!   127.0.0.1 (DNS rebinding) sends its own name. Not `localhost`, which may resolve to ::1
//!   first, where another user of this machine can listen on the same port;
//! - come from this server's own page if a browser says where it comes from (`Origin`,
//!   `Sec-Fetch-Site`): another site's page cannot make the browser ask (CSRF). Only the
//!   page itself may be opened from elsewhere (a link, the file `--open` opens), with its
//!   token;
//! - carry the token `cairn ui` printed in the address: in the `X-Cairn-Token` header (the
//!   page's requests), or as `?token=` in the address for what the browser loads by itself
//!   (the page, its script, a download). What writes takes it only in the header, which
//!   another origin cannot set without a preflight the ui never grants.

use std::net::SocketAddr;

/// The token and the names this server answers to.
pub struct Guard {
    token: String,
    hosts: Vec<String>,
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub &'static str);

/// What the guard looks at of a request.
pub struct Request<'a> {
    pub writes: bool,
    /// The browser opening the page itself (a GET of `/` to show it, `Sec-Fetch-Mode:
    /// navigate`): from a link elsewhere too, such as the file `--open` opens.
    pub opens_page: bool,
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub fetch_site: Option<&'a str>,
    pub header_token: Option<&'a str>,
    pub query: Option<&'a str>,
}

impl Guard {
    /// A new random token, for the server listening at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        let bytes: [u8; 24] = rand::random();
        Self::with_token(addr, hex::encode(bytes))
    }

    pub fn with_token(addr: SocketAddr, token: String) -> Self {
        let port = addr.port();
        // The address itself (what the printed address names), `[::1]` bracketed.
        let name = match addr.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        let mut hosts = vec![format!("{name}:{port}")];
        // Browsers leave out the port they imply.
        if port == 80 {
            hosts.push(name);
        }
        Self { token, hosts }
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// The address to open (with the token).
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.hosts[0], self.token)
    }

    /// Lets `r` through, or says why not.
    pub fn check(&self, r: &Request) -> Result<(), Refused> {
        let host = r.host.ok_or(Refused("no Host header"))?;
        if !self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return Err(Refused("this server is not known by that name (Host)"));
        }
        if let Some(origin) = r.origin {
            let own = origin
                .strip_prefix("http://")
                .is_some_and(|o| o.eq_ignore_ascii_case(host));
            if !own {
                return Err(Refused("a request from another site's page (Origin)"));
            }
        }
        if let Some(site) = r.fetch_site {
            if site != "same-origin" && site != "none" && !r.opens_page {
                return Err(Refused(
                    "a request from another site's page (Sec-Fetch-Site)",
                ));
            }
        }
        let given = match (r.header_token, r.writes) {
            (Some(t), _) => Some(t),
            (None, true) => None,
            (None, false) => r.query.and_then(token_in_query),
        };
        match given {
            Some(t) if same(t.as_bytes(), self.token.as_bytes()) => Ok(()),
            Some(_) => Err(Refused("wrong token: open the address cairn ui printed")),
            None => Err(Refused("no token: open the address cairn ui printed")),
        }
    }
}

/// `token=` of a query string.
fn token_in_query(query: &str) -> Option<&str> {
    query.split('&').find_map(|kv| kv.strip_prefix("token="))
}

/// Compares in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        Guard::with_token("127.0.0.1:8484".parse().unwrap(), "t0k".into())
    }

    fn read<'a>(host: &'a str, query: Option<&'a str>) -> Request<'a> {
        Request {
            writes: false,
            opens_page: false,
            host: Some(host),
            origin: None,
            fetch_site: None,
            header_token: None,
            query,
        }
    }

    #[test]
    fn the_names_are_those_of_the_address_listened_on() {
        let names = |addr: &str| Guard::with_token(addr.parse().unwrap(), "t".into()).hosts;
        // Not `localhost`: it may resolve to ::1 first, where another user can listen.
        assert_eq!(names("127.0.0.1:8484"), ["127.0.0.1:8484"]);
        assert_eq!(names("127.0.0.2:9"), ["127.0.0.2:9"]);
        assert_eq!(names("[::1]:9"), ["[::1]:9"]);
        assert_eq!(names("192.168.1.5:9"), ["192.168.1.5:9"]);
        assert_eq!(names("127.0.0.1:80"), ["127.0.0.1:80", "127.0.0.1"]);
        let g = Guard::with_token("[::1]:9".parse().unwrap(), "t".into());
        assert_eq!(g.url(), "http://[::1]:9/?token=t");
        let mut r = read("[::1]:9", Some("token=t"));
        r.origin = Some("http://[::1]:9");
        assert_eq!(g.check(&r), Ok(()));
    }

    #[test]
    fn the_token_host_and_origin_are_each_needed() {
        let g = guard();
        assert_eq!(g.check(&read("127.0.0.1:8484", Some("token=t0k"))), Ok(()));
        assert_eq!(
            g.check(&read("127.0.0.1:8484", Some("a=1&token=t0k"))),
            Ok(())
        );
        assert!(g.check(&read("localhost:8484", Some("token=t0k"))).is_err());
        assert!(g.check(&read("127.0.0.1:8484", None)).is_err());
        assert!(g.check(&read("127.0.0.1:8484", Some("token=t0"))).is_err());
        assert!(g
            .check(&read("127.0.0.1:8484", Some("token=t0kk")))
            .is_err());
        // DNS rebinding: another name for this address.
        assert!(g
            .check(&read("evil.example:8484", Some("token=t0k")))
            .is_err());
        assert!(g.check(&read("127.0.0.1:8485", Some("token=t0k"))).is_err());
        let mut r = read("127.0.0.1:8484", Some("token=t0k"));
        r.origin = Some("http://evil.example");
        assert!(g.check(&r).is_err());
        r.origin = Some("http://127.0.0.1:8484");
        assert_eq!(g.check(&r), Ok(()));
        r.fetch_site = Some("cross-site");
        assert!(g.check(&r).is_err());
        // The page opened from a link elsewhere (the file --open opens), with its token.
        r.opens_page = true;
        r.origin = None;
        assert_eq!(g.check(&r), Ok(()));
        r.opens_page = false;
        r.origin = Some("http://127.0.0.1:8484");
        r.fetch_site = Some("same-origin");
        assert_eq!(g.check(&r), Ok(()));
        // What writes takes the token from the header only.
        r.writes = true;
        assert!(g.check(&r).is_err());
        r.header_token = Some("t0k");
        assert_eq!(g.check(&r), Ok(()));
    }
}
