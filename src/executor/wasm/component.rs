//! What a component's store holds (WASI 0.2 and wasi:http), and the allow-list gating both.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::SocketError;
use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup;
use wasmtime_wasi::p2::bindings::sockets::network::{self, ErrorCode, IpAddress, Network};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

use super::host::MemoryCap;
use super::streams::GuestStderr;
use crate::outbound::{AllowList, DenialLog, denied_message, looked_up_as};

/// What each component's store holds.
pub struct ComponentHost {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub http: WasiHttpCtx,
    pub outbound: Outbound,
    pub limits: MemoryCap,
}

impl WasiView for ComponentHost {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for ComponentHost {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            hooks: &mut self.outbound,
            table: &mut self.table,
            ctx: &mut self.http,
        }
    }
}

/// Every WASI 0.2 interface, wasi:http and wasi:sockets among them, whatever the allow-list
/// says: a component that imports them starts, and is refused at the request instead.
pub fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<ComponentHost>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    // Name lookups go through the allow-list too (see `NameLookups`).
    linker.allow_shadowing(true);
    ip_name_lookup::add_to_linker::<ComponentHost, GatedNames>(&mut linker, |host| NameLookups {
        sockets: wasmtime_wasi::sockets::WasiSocketsCtxView {
            ctx: host.wasi.sockets(),
            table: &mut host.table,
        },
        outbound: &host.outbound,
    })?;
    linker.allow_shadowing(false);
    Ok(linker)
}

/// `wasi:sockets/ip-name-lookup`, only for the names the allow-list has. WASI allows name
/// lookups all or nothing, but a lookup is a message to whoever answers for the domain:
/// with any name allowed, a guest let reach only `db.internal` could still send data out
/// in lookups of `<data>.attacker.example`. A `*` entry allows every name.
struct NameLookups<'a> {
    sockets: wasmtime_wasi::sockets::WasiSocketsCtxView<'a>,
    outbound: &'a Outbound,
}

/// What `NameLookups` is reached through in the linker.
struct GatedNames;

impl wasmtime::component::HasData for GatedNames {
    type Data<'a> = NameLookups<'a>;
}

// The lookup functions' errors are converted through the interface they come from:
// as WASI converts them.
impl network::Host for NameLookups<'_> {
    fn convert_error_code(&mut self, error: SocketError) -> wasmtime::Result<ErrorCode> {
        self.sockets.convert_error_code(error)
    }

    fn network_error_code(
        &mut self,
        error: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        self.sockets.network_error_code(error)
    }
}

impl network::HostNetwork for NameLookups<'_> {
    fn drop(&mut self, network: Resource<Network>) -> wasmtime::Result<()> {
        network::HostNetwork::drop(&mut self.sockets, network)
    }
}

impl ip_name_lookup::Host for NameLookups<'_> {
    fn resolve_addresses(
        &mut self,
        network: Resource<Network>,
        name: String,
    ) -> Result<Resource<ip_name_lookup::ResolveAddressStream>, SocketError> {
        if let Some(domain) = looked_up_as(&name)
            && !self.outbound.allowed.allows_domain(&domain)
        {
            // A domain name is at most 253 characters; the guest's text may be longer.
            let domain = domain.get(..253).unwrap_or(&domain);
            self.outbound.refused(&format!(
                "wasmloop: denied a name lookup of {domain}: components look up only the \
                 names --allow-outbound (WASMLOOP_ALLOW_OUTBOUND) lists; add `{domain}:PORT` \
                 to it to allow this"
            ));
            return Err(ErrorCode::PermanentResolverFailure.into());
        }
        ip_name_lookup::Host::resolve_addresses(&mut self.sockets, network, name)
    }
}

impl ip_name_lookup::HostResolveAddressStream for NameLookups<'_> {
    fn resolve_next_address(
        &mut self,
        stream: Resource<ip_name_lookup::ResolveAddressStream>,
    ) -> Result<Option<IpAddress>, SocketError> {
        self.sockets.resolve_next_address(stream)
    }

    fn subscribe(
        &mut self,
        stream: Resource<ip_name_lookup::ResolveAddressStream>,
    ) -> wasmtime::Result<Resource<wasmtime_wasi::p2::DynPollable>> {
        self.sockets.subscribe(stream)
    }

    fn drop(
        &mut self,
        stream: Resource<ip_name_lookup::ResolveAddressStream>,
    ) -> wasmtime::Result<()> {
        ip_name_lookup::HostResolveAddressStream::drop(&mut self.sockets, stream)
    }
}

/// The allow-list as one instance sees it: a refusal is logged among its own logs.
#[derive(Clone)]
pub struct Outbound {
    pub allowed: Arc<AllowList>,
    pub logs: GuestStderr,
    denials: Arc<std::sync::Mutex<DenialLog>>,
}

impl Outbound {
    pub fn new(allowed: Arc<AllowList>, logs: GuestStderr) -> Self {
        let denials = DenialLog::new(std::time::Instant::now());
        Outbound {
            allowed,
            logs,
            denials: Arc::new(std::sync::Mutex::new(denials)),
        }
    }

    /// Logs a refusal among the instance's logs, unless too many came at once.
    fn refused(&self, line: &str) {
        if crate::lock(&self.denials).admit(std::time::Instant::now()) {
            self.logs.note(line);
        }
    }

    /// What the instance keeps to say, at the end of each activation, how many refusals
    /// were left out of its logs.
    pub fn denials(&self) -> Arc<std::sync::Mutex<DenialLog>> {
        self.denials.clone()
    }

    /// Sockets: connects and datagrams checked by address; binds (a connect makes one)
    /// allowed; listening refused, since the list is about reaching out.
    pub fn gate_sockets(&self, wasi: &mut WasiCtxBuilder) {
        // Lookups are allowed here and gated by name in `NameLookups`.
        wasi.allow_tcp(true)
            .allow_udp(true)
            .allow_ip_name_lookup(true);
        let outbound = self.clone();
        wasi.socket_addr_check(move |addr, usage| {
            let outbound = outbound.clone();
            Box::pin(async move { outbound.allows(addr, usage).await })
        });
    }

    async fn allows(&self, addr: SocketAddr, usage: SocketAddrUse) -> bool {
        let what = match usage {
            SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => return true,
            // A datagram from a place not listed is dropped without a word: logging each
            // could flood the logs.
            SocketAddrUse::UdpReceive => return self.allowed.allows_socket(addr).await,
            SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => {
                self.refused(&format!(
                    "wasmloop: denied listening for connections on {addr}: components may \
                     only reach out (--allow-outbound), not accept connections"
                ));
                return false;
            }
            SocketAddrUse::TcpConnect => "a TCP connection",
            SocketAddrUse::UdpSend => "a UDP datagram",
        };
        let allowed = self.allowed.allows_socket(addr).await;
        if !allowed {
            self.refused(&denied_message(what, &addr.ip().to_string(), addr.port()));
        }
        allowed
    }
}

type Sent = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for Outbound {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Sent {
        drop(fut);
        let uri = request.uri();
        // The sender connects to the authority as written: with user info in it, what it
        // reaches and what `host()` says could differ. Nobody needs it for an API call.
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            self.refused(
                "wasmloop: denied an HTTP request whose URL holds user info (user@host): \
                 send credentials in a header instead",
            );
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        let host = uri.host().unwrap_or_default().to_owned();
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        if !self.allowed.allows_http(&host, port) {
            self.refused(&denied_message("an HTTP request", &host, port));
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}
