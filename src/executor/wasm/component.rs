//! What a component's store holds (WASI 0.2 and wasi:http), and the allow-list gating both.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::sockets::network::{
    self, ErrorCode, IpAddress, IpAddressFamily, Network,
};
use wasmtime_wasi::p2::bindings::sockets::{ip_name_lookup, tcp_create_socket, udp_create_socket};
use wasmtime_wasi::p2::{SocketError, TcpSocket, UdpSocket};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
    WasiHttpView,
};

use super::descriptors::{self, Descriptors};
use super::memory_cap::MemoryCap;
use super::streams::GuestStderr;
use crate::outbound::{AllowList, DenialLog, denied_message, looked_up_as};

/// The most WASI resources one component instance may hold at once. Each costs the host
/// memory (an outgoing body up to `BODY_CHUNK` twice, a header set `MAX_FIELDS_BYTES`), so
/// their number is what bounds it: 1024 keeps one instance's worst under 48 MiB.
pub const MAX_RESOURCES: usize = 1024;
/// The bytes of one header set a component makes.
pub const MAX_FIELDS_BYTES: usize = 16 * 1024;
/// An outgoing HTTP body takes writes of at most this, and holds one more while unsent.
const BODY_CHUNK: usize = 16 * 1024;

/// What each component's store holds.
pub struct ComponentHost {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub http: WasiHttpCtx,
    pub outbound: Outbound,
    pub limits: MemoryCap,
    /// Folders preopened for it: descriptors it holds without opening them.
    pub preopens: usize,
    /// What it reads as its environment.
    pub environ: super::environ::Environ,
}

/// A component's store data: its WASI context, the allow-list over its requests and
/// sockets, its memory cap, and what it reads as its environment.
pub fn host(
    wasi: WasiCtx,
    outbound: Outbound,
    limits: MemoryCap,
    preopens: usize,
    environ: super::environ::Environ,
) -> ComponentHost {
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_RESOURCES);
    let mut http = WasiHttpCtx::new();
    http.set_field_size_limit(MAX_FIELDS_BYTES);
    ComponentHost {
        wasi,
        table,
        http,
        outbound,
        limits,
        preopens,
        environ,
    }
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
    // Name lookups go through the allow-list too (see `NameLookups`), and new sockets
    // and files through the instance's caps (`descriptors`).
    linker.allow_shadowing(true);
    fn gated(host: &mut ComponentHost) -> NameLookups<'_> {
        NameLookups {
            sockets: wasmtime_wasi::sockets::WasiSocketsCtxView {
                ctx: host.wasi.sockets(),
                table: &mut host.table,
            },
            outbound: &host.outbound,
        }
    }
    ip_name_lookup::add_to_linker::<ComponentHost, GatedNames>(&mut linker, gated)?;
    tcp_create_socket::add_to_linker::<ComponentHost, GatedNames>(&mut linker, gated)?;
    udp_create_socket::add_to_linker::<ComponentHost, GatedNames>(&mut linker, gated)?;
    count_opened_files(&mut linker)?;
    super::environ::serve_to_components(&mut linker, |host| &host.environ)?;
    linker.allow_shadowing(false);
    Ok(linker)
}

/// The WASI 0.2 filesystem interface as wasmtime-wasi registers it (imports of earlier
/// 0.2 versions resolve to it): shadowing another version's would go unnoticed.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// `descriptor.open-at`, the only way a component opens a file, held to the instance's cap
/// on open files. Past it the guest gets `quota`: WASI 0.2 has no code for "too many open
/// files", and this one says a limit of the instance's was reached; the log line says which.
fn count_opened_files(linker: &mut Linker<ComponentHost>) -> wasmtime::Result<()> {
    use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView};
    use wasmtime_wasi::p2::bindings::filesystem::types as fs;
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: wasmtime::StoreContextMut<'_, ComponentHost>,
         (dir, path_flags, path, open_flags, flags): (
            Resource<Descriptor>,
            fs::PathFlags,
            String,
            fs::OpenFlags,
            fs::DescriptorFlags,
        )| {
            Box::new(async move {
                let host = store.data_mut();
                let files =
                    descriptors::live::<Descriptor>(&mut host.table).saturating_sub(host.preopens);
                if host.outbound.descriptors.admit_file(files).is_err() {
                    return Ok((Err(fs::ErrorCode::Quota),));
                }
                let mut files = WasiFilesystemCtxView {
                    ctx: host.wasi.filesystem(),
                    table: &mut host.table,
                };
                let opened = fs::HostDescriptor::open_at(
                    &mut files, dir, path_flags, path, open_flags, flags,
                )
                .await;
                // As wasmtime-wasi's glue converts the error (a trap stays a trap).
                let opened = match opened {
                    Ok(file) => Ok(file),
                    Err(e) => Err(e.downcast()?),
                };
                Ok((opened,))
            })
        },
    )?;
    Ok(())
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

impl NameLookups<'_> {
    /// Whether the instance may open one more TCP or UDP socket.
    fn admit_socket(&mut self) -> Result<(), SocketError> {
        let table = &mut *self.sockets.table;
        let sockets = descriptors::live::<TcpSocket>(table) + descriptors::live::<UdpSocket>(table);
        self.outbound
            .descriptors
            .admit_socket(sockets)
            .map_err(|_| ErrorCode::NewSocketLimit.into())
    }
}

impl tcp_create_socket::Host for NameLookups<'_> {
    fn create_tcp_socket(
        &mut self,
        family: IpAddressFamily,
    ) -> Result<Resource<TcpSocket>, SocketError> {
        self.admit_socket()?;
        tcp_create_socket::Host::create_tcp_socket(&mut self.sockets, family)
    }
}

impl udp_create_socket::Host for NameLookups<'_> {
    async fn create_udp_socket(
        &mut self,
        family: IpAddressFamily,
    ) -> Result<Resource<UdpSocket>, SocketError> {
        self.admit_socket()?;
        udp_create_socket::Host::create_udp_socket(&mut self.sockets, family).await
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
    /// The instance's files and sockets, against its caps.
    pub descriptors: Descriptors,
    /// Where refusals are counted.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Outbound {
    pub fn new(
        allowed: Arc<AllowList>,
        logs: GuestStderr,
        descriptors: Descriptors,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Self {
        let denials = DenialLog::new(std::time::Instant::now());
        Outbound {
            metrics,
            allowed,
            logs,
            denials: Arc::new(std::sync::Mutex::new(denials)),
            descriptors,
        }
    }

    /// Logs a refusal among the instance's logs, unless too many came at once.
    fn refused(&self, line: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.outbound_refused();
        }
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
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        BODY_CHUNK
    }

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
        // Its connection counts against the instance's sockets until it closes (the
        // response read, or dropped), or until the request fails.
        let Ok(connection) = self.descriptors.admit_connection() else {
            return Box::new(async { Err(HttpError::ConnectionLimitReached) });
        };
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            let io = async move {
                let _open = connection;
                io.await
            };
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

/// An HTTP component's store, as the http and http-p3 backends make one for each instance:
/// its stdout and stderr (both logs: the answer is the response), what it reads as its
/// environment, its caps on descriptors, the allow-list's refusals, and the bytes of its
/// linear memories.
pub struct HttpStore {
    pub store: wasmtime::Store<ComponentHost>,
    pub stdout: GuestStderr,
    pub stderr: GuestStderr,
    pub environ: super::environ::Environ,
    pub descriptors: Descriptors,
    pub denials: Arc<std::sync::Mutex<DenialLog>>,
    pub memory: Arc<std::sync::atomic::AtomicUsize>,
}

/// A store for an instance of an HTTP component started as `start` says, its logs under
/// `attribution`: the action's folder preopened (if any), its connections through
/// `outbound`, its descriptors within `caps`, told the action's variables (a fresh
/// instance its activation's too, once it has come).
pub fn http_store(
    engine: &super::WasmEngine,
    start: &crate::executor::StartSpec,
    env: &Arc<[(String, String)]>,
    preopen: Option<&std::path::PathBuf>,
    outbound: &Arc<AllowList>,
    caps: descriptors::Caps,
    attribution: crate::logs::Attribution,
) -> Result<HttpStore, super::WasmError> {
    use crate::logs::Stream;
    let stdout = GuestStderr::on(Stream::Stdout, attribution.clone());
    let stderr = GuestStderr::on(Stream::Stderr, attribution);
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(super::streams::StdioOut(stdout.clone()))
        .stderr(super::streams::StdioOut(stderr.clone()))
        .args(&[&start.main]);
    super::preopen_action(&mut wasi, preopen)?;
    let descriptors = Descriptors::new(caps, stderr.clone());
    let outbound = Outbound::new(
        outbound.clone(),
        stderr.clone(),
        descriptors.clone(),
        engine.metrics.clone(),
    );
    outbound.gate_sockets(&mut wasi);
    let denials = outbound.denials();
    // Called only once its activation has come, a fresh instance is told its values then.
    let environ = super::environ::Environ::new(env.clone(), start.fresh, false);
    let memory = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let host = host(
        wasi.build(),
        outbound,
        MemoryCap {
            cap: engine.settings.memory_cap,
            total: memory.clone(),
        },
        usize::from(preopen.is_some()),
        environ.clone(),
    );
    Ok(HttpStore {
        store: super::guest_store(engine, host, |host| &mut host.limits),
        stdout,
        stderr,
        environ,
        descriptors,
        denials,
        memory,
    })
}

/// What instantiating an HTTP component within `timeout` gave (`made`): the instance, or
/// the guest's exit in its stderr's words (which go out), or that it was still starting.
pub fn instantiated<T>(
    made: Result<wasmtime::Result<T>, tokio::time::error::Elapsed>,
    timeout: std::time::Duration,
    stderr: &GuestStderr,
) -> Result<T, super::WasmError> {
    match made {
        Ok(Ok(instance)) => Ok(instance),
        Ok(Err(e)) => {
            let detail = super::exit_reason(Err(e), stderr);
            stderr.flush();
            Err(super::WasmError::GuestExited { detail })
        }
        Err(_) => Err(super::WasmError::StillStarting(timeout)),
    }
}

/// What an HTTP component reads when its request's body stopped before its end.
pub fn intake_error(error: axum::Error) -> HttpError {
    use crate::executor::intake::IntakeError;
    let source = error.into_inner();
    match source.downcast_ref::<IntakeError>() {
        Some(IntakeError::TooLarge(limit)) => HttpError::HttpRequestBodySize(Some(*limit as u64)),
        Some(IntakeError::TimedOut(_)) => HttpError::ConnectionReadTimeout,
        Some(IntakeError::Read(_)) | None => HttpError::ConnectionTerminated,
    }
}

/// What an activation whose response body failed before its end (`how`) is told.
pub fn body_failed(how: &str) -> String {
    format!("the component's response body failed before its end: {how}")
}

/// A component's response body, up to `max` bytes (`--max-result-bytes`): past it, the
/// activation's failure.
pub async fn read_body<B>(body: B, max: usize) -> Result<bytes::Bytes, crate::executor::RunError>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::fmt::Debug,
{
    use crate::executor::RunError;
    use http_body_util::BodyExt;
    let mut body = std::pin::pin!(body);
    let mut read = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| RunError::Exited(Some(body_failed(&format!("{e:?}")))))?;
        if let Ok(data) = frame.into_data() {
            if read.len() + data.len() > max {
                return Err(RunError::BodyTooLong(max));
            }
            read.extend_from_slice(&data);
        }
    }
    Ok(read.freeze())
}
