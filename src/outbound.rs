//! The outbound allow-list (`--allow-outbound`): which hosts and ports a component may reach.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// One place a component may connect to, or send HTTP requests to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    host: Allowed,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Allowed {
    Any,
    Ip(IpAddr),
    /// Lower case, without a trailing dot.
    Name(String),
}

impl FromStr for Rule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "*" {
            return Ok(Rule {
                host: Allowed::Any,
                port: None,
            });
        }
        let example = "give host:port, host:*, *:port or * (an IPv6 address in brackets: [::1]:80)";
        let (host, port) = text
            .rsplit_once(':')
            .filter(|(host, _)| !host.is_empty())
            .ok_or_else(|| format!("`{text}` is not an outbound entry: {example}"))?;
        let port = match port {
            "*" => None,
            port => Some(
                port.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| {
                        format!("`{text}`: the port `{port}` is not a port number (1-65535) or *")
                    })?,
            ),
        };
        let host = if host == "*" {
            Allowed::Any
        } else if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Allowed::Ip(IpAddr::V6(
                v6.parse()
                    .map_err(|_| format!("`{text}`: `{v6}` is not an IPv6 address"))?,
            ))
        } else if host.contains(':') {
            return Err(format!(
                "`{text}`: write an IPv6 address in brackets, e.g. [{host}]:{}",
                port.map_or("*".to_owned(), |p| p.to_string())
            ));
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            Allowed::Ip(ip)
        } else if host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        {
            Allowed::Name(host.trim_end_matches('.').to_ascii_lowercase())
        } else if let Some(ascii) = looked_up_as(host).filter(|_| !host.is_ascii()) {
            // An international name: the list holds names as they are looked up.
            return Err(format!(
                "`{text}`: write the name as it is looked up, `{ascii}:{}`",
                port.map_or("*".to_owned(), |p| p.to_string())
            ));
        } else {
            return Err(format!("`{text}`: `{host}` is not a host name or address"));
        };
        Ok(Rule { host, port })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Allowed::Any if self.port.is_none() => return f.write_str("*"),
            Allowed::Any => f.write_str("*")?,
            Allowed::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            Allowed::Ip(ip) => write!(f, "{ip}")?,
            Allowed::Name(name) => f.write_str(name)?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => f.write_str(":*"),
        }
    }
}

/// Where components may go. Empty (the default) denies every connection and request.
#[derive(Debug, Clone, Default)]
pub struct AllowList {
    entries: Vec<Rule>,
    /// The addresses of the names the entries have, shared by every instance.
    names: std::sync::Arc<NameCache>,
}

/// Two lists are the same if their entries are: what was looked up is no part of it.
impl PartialEq for AllowList {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Eq for AllowList {}

/// The addresses of names, kept a few seconds: a connect checked against a named entry
/// would otherwise wait for a lookup of its own (a DNS round trip, for every connection).
#[derive(Debug, Default)]
struct NameCache {
    found: std::sync::Mutex<std::collections::HashMap<String, Found>>,
    /// Lookups made, for the tests.
    #[cfg(test)]
    lookups: std::sync::atomic::AtomicUsize,
}

#[derive(Debug)]
struct Found {
    at: std::time::Instant,
    addresses: std::sync::Arc<[IpAddr]>,
}

/// How long a name's addresses are used before it is looked up again: short enough that a
/// service moving to new addresses is followed within seconds.
const NAME_TTL: std::time::Duration = std::time::Duration::from_secs(5);

impl NameCache {
    /// `name`'s addresses, looked up unless known from the last few seconds. A failed
    /// lookup is not kept: the next check tries again.
    async fn addresses(&self, name: &str) -> Option<std::sync::Arc<[IpAddr]>> {
        let now = std::time::Instant::now();
        if let Some(found) = crate::lock(&self.found).get(name)
            && now.saturating_duration_since(found.at) < NAME_TTL
        {
            return Some(found.addresses.clone());
        }
        #[cfg(test)]
        self.lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let addresses: std::sync::Arc<[IpAddr]> = tokio::net::lookup_host((name, 0))
            .await
            .ok()?
            .map(|a| a.ip())
            .collect();
        let found = Found {
            at: now,
            addresses: addresses.clone(),
        };
        crate::lock(&self.found).insert(name.to_owned(), found);
        Some(addresses)
    }
}

impl AllowList {
    pub fn new(entries: Vec<Rule>) -> Self {
        AllowList {
            entries,
            names: Default::default(),
        }
    }

    /// Whether a guest may look up `domain` (as `looked_up_as` gives it): a name an entry
    /// has, or any name with a `*` entry.
    pub fn allows_domain(&self, domain: &str) -> bool {
        let domain = domain.strip_suffix('.').unwrap_or(domain);
        self.entries.iter().any(|e| match &e.host {
            Allowed::Any => true,
            Allowed::Ip(_) => false,
            // Kept without a trailing dot (see `Rule::from_str`).
            Allowed::Name(allowed) => allowed.eq_ignore_ascii_case(domain),
        })
    }

    /// An HTTP request to `host:port` (its authority, as the guest wrote it).
    pub fn allows_http(&self, host: &str, port: u16) -> bool {
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let ip = host.parse::<IpAddr>().ok();
        let name = host.trim_end_matches('.');
        self.entries.iter().any(|e| {
            e.port.is_none_or(|p| p == port)
                && match &e.host {
                    Allowed::Any => true,
                    Allowed::Ip(allowed) => ip == Some(*allowed),
                    Allowed::Name(allowed) => allowed.eq_ignore_ascii_case(name),
                }
        })
    }

    /// A socket to `addr`: an address entry matches it as written; a named one, by the
    /// addresses its name had when the host last looked it up, at most 5 s ago (whatever the
    /// guest was told).
    pub async fn allows_socket(&self, addr: SocketAddr) -> bool {
        for entry in &self.entries {
            if entry.port.is_some_and(|p| p != addr.port()) {
                continue;
            }
            let matched = match &entry.host {
                Allowed::Any => true,
                Allowed::Ip(ip) => same_ip(*ip, addr.ip()),
                Allowed::Name(name) => self
                    .names
                    .addresses(name)
                    .await
                    .is_some_and(|found| found.iter().any(|ip| same_ip(*ip, addr.ip()))),
            };
            if matched {
                return true;
            }
        }
        false
    }
}

/// Equal, counting an IPv4-mapped IPv6 address as its IPv4 one.
fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

impl FromStr for AllowList {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        text.split(',')
            .filter(|e| !e.trim().is_empty())
            .map(Rule::from_str)
            .collect::<Result<Vec<_>, _>>()
            .map(AllowList::new)
    }
}

impl fmt::Display for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, entry) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{entry}")?;
        }
        Ok(())
    }
}

/// The domain a guest's lookup of `name` asks the resolver for, read as WASI reads it
/// (unicode as punycode, percent escapes decoded); none for an address written as a name or
/// text that is no name, which WASI answers without a lookup.
pub fn looked_up_as(name: &str) -> Option<String> {
    match url::Host::parse(name) {
        Ok(url::Host::Domain(domain)) => Some(domain),
        _ => None,
    }
}

/// The one line logged when a component is refused a connection or request: what was
/// refused, and the entry that would allow it.
pub fn denied_message(what: &str, host: &str, port: u16) -> String {
    let entry = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    format!(
        "wasmloop: denied {what} to {entry}: components reach only what --allow-outbound \
         (WASMLOOP_ALLOW_OUTBOUND) lists; add `{entry}` to it to allow this"
    )
}

/// How many refusals an instance logs: a burst, then one a second. A guest retrying a
/// refused call in a loop would otherwise write a line per try into the platform's logs.
/// How many were left out is logged at the end of the activation.
#[derive(Debug)]
pub struct DenialLog {
    /// Lines that may be written now (refilled by one a second, up to the burst).
    allowance: f64,
    at: std::time::Instant,
    left_out: u64,
}

const DENIAL_BURST: f64 = 10.0;

impl DenialLog {
    pub fn new(now: std::time::Instant) -> Self {
        DenialLog {
            allowance: DENIAL_BURST,
            at: now,
            left_out: 0,
        }
    }

    /// Whether a refusal at `now` is logged; if not, it is counted.
    pub fn admit(&mut self, now: std::time::Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64();
        self.allowance = (self.allowance + refill).min(DENIAL_BURST);
        self.at = now;
        if self.allowance < 1.0 {
            self.left_out += 1;
            return false;
        }
        self.allowance -= 1.0;
        true
    }

    /// The line that says how many refusals were left out since it was last asked, if any.
    pub fn left_out(&mut self) -> Option<String> {
        match std::mem::take(&mut self.left_out) {
            0 => None,
            n => Some(format!(
                "wasmloop: {n} more refusals were not logged (at most {DENIAL_BURST} at once, \
                 then one a second)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> AllowList {
        text.parse().unwrap()
    }

    #[test]
    fn refusals_are_logged_in_a_burst_then_one_a_second_and_the_rest_counted() {
        let start = std::time::Instant::now();
        let at = |ms: u64| start + std::time::Duration::from_millis(ms);
        let mut log = DenialLog::new(start);
        assert_eq!(log.left_out(), None);
        for i in 0..10 {
            assert!(log.admit(at(i)), "{i}");
        }
        assert!(!log.admit(at(10)));
        assert!(!log.admit(at(500)));
        assert!(log.admit(at(1_100)), "a second later");
        assert!(!log.admit(at(1_200)));
        let counted = log.left_out().expect("three were left out");
        assert!(
            counted.starts_with("wasmloop: 3 more refusals were not logged"),
            "{counted}"
        );
        assert_eq!(log.left_out(), None, "told once");
        // Quiet for a minute: a burst again, not sixty lines.
        for i in 0..10 {
            assert!(log.admit(at(61_000 + i)), "{i}");
        }
        assert!(!log.admit(at(61_010)));
    }

    #[test]
    fn entries_parse_and_print_as_written() {
        let parsed = list("Example.COM:443, *:6379,api.test:*,127.0.0.1:80,[::1]:8080,*");
        assert_eq!(
            parsed.to_string(),
            "example.com:443,*:6379,api.test:*,127.0.0.1:80,[::1]:8080,*"
        );
        assert_eq!(list(""), AllowList::default(), "empty: nowhere");
    }

    #[test]
    fn a_malformed_entry_says_how_to_write_it() {
        let error = |text: &str| text.parse::<AllowList>().unwrap_err();
        assert!(error("example.com").contains("give host:port, host:*, *:port or *"));
        assert!(error("example.com:http").contains("not a port number"));
        assert!(error("example.com:0").contains("not a port number"));
        assert!(error("::1:80").contains("e.g. [::1]:80"));
        assert!(error("[nope]:80").contains("not an IPv6 address"));
        assert!(error("a/b:80").contains("not a host name"));
        assert!(error("bücher.example:443").contains("`xn--bcher-kva.example:443`"));
    }

    #[test]
    fn http_requests_match_by_host_and_port() {
        let allowed = list("example.com:443,*:8080,10.0.0.1:*");
        assert!(allowed.allows_http("EXAMPLE.com", 443));
        assert!(allowed.allows_http("example.com.", 443));
        assert!(!allowed.allows_http("example.com", 80));
        assert!(!allowed.allows_http("sub.example.com", 443));
        assert!(allowed.allows_http("anything", 8080));
        assert!(allowed.allows_http("10.0.0.1", 1));
        assert!(!allowed.allows_http("10.0.0.2", 1));
        assert!(!AllowList::default().allows_http("example.com", 443));
        assert!(list("*").allows_http("example.com", 443));
        assert!(list("[::1]:80").allows_http("[::1]", 80));
    }

    #[tokio::test]
    async fn sockets_match_by_address_and_named_hosts_by_their_addresses() {
        let at = |text: &str| text.parse::<SocketAddr>().unwrap();
        let allowed = list("127.0.0.1:6379,localhost:5432");
        assert!(allowed.allows_socket(at("127.0.0.1:6379")).await);
        assert!(allowed.allows_socket(at("[::ffff:127.0.0.1]:6379")).await);
        assert!(!allowed.allows_socket(at("127.0.0.1:6380")).await);
        assert!(allowed.allows_socket(at("127.0.0.1:5432")).await);
        assert!(!allowed.allows_socket(at("10.1.2.3:5432")).await);
        assert!(!AllowList::default().allows_socket(at("127.0.0.1:1")).await);
        assert!(list("*:53").allows_socket(at("10.1.2.3:53")).await);
    }

    #[tokio::test]
    async fn a_named_entry_is_looked_up_once_for_checks_a_few_seconds_apart() {
        let at = |text: &str| text.parse::<SocketAddr>().unwrap();
        let allowed = list("localhost:5432");
        let lookups = || {
            allowed
                .names
                .lookups
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        for _ in 0..3 {
            assert!(allowed.allows_socket(at("127.0.0.1:5432")).await);
            assert!(!allowed.allows_socket(at("10.1.2.3:5432")).await);
        }
        assert_eq!(lookups(), 1);
        // Instances share what their list looked up.
        let shared = std::sync::Arc::new(allowed.clone());
        assert!(shared.allows_socket(at("127.0.0.1:5432")).await);
        assert_eq!(lookups(), 1);
        // Once stale, the name is looked up again (unless the clock is younger than that).
        let made_stale = {
            let mut found = crate::lock(&allowed.names.found);
            let entry = found.get_mut("localhost").unwrap();
            entry.at.checked_sub(NAME_TTL).map(|stale| entry.at = stale)
        };
        if made_stale.is_none() {
            return;
        }
        assert!(allowed.allows_socket(at("127.0.0.1:5432")).await);
        assert_eq!(lookups(), 2);
    }

    #[test]
    fn a_guest_looks_up_only_the_names_listed_or_any_with_a_star() {
        let named = list("db.internal:5432,10.0.0.1:80,xn--bcher-kva.example:443");
        let allows = |name: &str| looked_up_as(name).is_none_or(|d| named.allows_domain(&d));
        assert!(allows("db.internal") && allows("DB.Internal."));
        assert!(!allows("data.attacker.example") && !allows("internal"));
        assert!(!allows("db.internal.."), "one trailing dot, not any number");
        // As WASI reads names: unicode as punycode, addresses (old forms too) not looked up.
        assert!(allows("bücher.example"));
        assert_eq!(
            looked_up_as("Bücher.Example").as_deref(),
            Some("xn--bcher-kva.example")
        );
        for address in ["10.9.9.9", "[::1]", "::1", "127.1", "1.2.3.4."] {
            assert_eq!(looked_up_as(address), None, "{address}");
        }
        assert!(list("*:443").allows_domain("anything.example"));
        assert!(!list("10.0.0.1:80").allows_domain("db.internal"));
    }
}
