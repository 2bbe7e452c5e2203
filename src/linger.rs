//! Connections closed without losing their last answer: a lingering close, as Go's net/http does.
//!
//! A server that answers before reading the whole body (413 past the cap, 403 for a second
//! `/init` with a body too big to drain) closes the connection with the client's bytes
//! still arriving. The kernel answers those with a reset, and a reset makes the client's
//! kernel throw away what it had received but not yet read: the answer, which the client
//! only reads once it has sent its body. So the connection is not closed at once: its
//! sending side is shut (the client sees the answer, then the end), and what the client
//! still sends is read and dropped until it closes its side, for a bounded time.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// How long a closed connection may keep reading what its client still sends. Go waits
/// 500 ms; a client sending a 72 MB upload at a few hundred MB/s needs a little more.
const LINGER: Duration = Duration::from_secs(2);

/// Connections lingering at once; past it, a connection closes at once (a flood of them
/// must not hold descriptors the actions need).
const MAX_LINGERING: usize = 256;

/// A listener whose connections close lingering.
pub struct LingeringListener {
    inner: TcpListener,
    lingering: Arc<AtomicUsize>,
}

impl LingeringListener {
    pub fn new(inner: TcpListener) -> Self {
        LingeringListener {
            inner,
            lingering: Arc::default(),
        }
    }
}

impl axum::serve::Listener for LingeringListener {
    type Io = Lingering;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Lingering, std::net::SocketAddr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        // A streamed response goes out in pieces as the action writes them: none may wait
        // for the client's acknowledgement of the last (Nagle's algorithm) first.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let connection = Lingering {
            stream: Some(stream),
            lingering: self.lingering.clone(),
        };
        (connection, addr)
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

/// The address a request's connection was made to: the authority of an HTTP/1.0 request
/// that names none.
#[derive(Debug, Clone, Copy)]
pub struct LocalAddr(pub std::net::SocketAddr);

/// A connection that, dropped, lingers (see the module's comment).
pub struct Lingering {
    /// Always there until dropped.
    stream: Option<TcpStream>,
    lingering: Arc<AtomicUsize>,
}

impl Lingering {
    /// The address the connection was made to.
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        match &self.stream {
            Some(stream) => stream.local_addr(),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    fn stream(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(
            self.stream
                .as_mut()
                .expect("the stream is only taken by drop"),
        )
    }
}

impl AsyncRead for Lingering {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.stream().poll_read(cx, buf)
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.stream().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.stream().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(mut stream) = self.stream.take() else {
            return;
        };
        // Nothing more will come from a client that has closed its side: no need to wait.
        let mut probe = [0u8; 1];
        if matches!(stream.try_read(&mut probe), Ok(0)) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.lingering.fetch_add(1, Ordering::Relaxed) >= MAX_LINGERING {
            self.lingering.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let lingering = self.lingering.clone();
        runtime.spawn(async move {
            let _ = stream.shutdown().await;
            let mut dropped = vec![0u8; 64 * 1024];
            let _ = tokio::time::timeout(LINGER, async {
                while let Ok(1..) = stream.read(&mut dropped).await {}
            })
            .await;
            lingering.fetch_sub(1, Ordering::Relaxed);
        });
    }
}
