//! A TCP proxy on 127.0.0.1 that can black-hole its connections, for tests of what a manager does when
//! its apiserver stops answering without the connection being reset (a network partition, a hung load
//! balancer).
//!
//! While black-holed the proxy stops moving bytes in both directions but keeps every connection open,
//! and it neither accepts upstream connections for new clients nor closes anything: the client sees
//! requests that never get an answer, exactly as across a partition. What the client wrote meanwhile
//! waits in the socket buffers, as unacknowledged segments wait to be retransmitted; when the partition
//! heals it is delivered, unless the client gave up on the connection first (a reset, which a real
//! network would deliver too, tears it down here without forwarding what was held).
//!
//! It can also freeze only the connections it already has ([`BlackHoleProxy::freeze_existing`]):
//! they never move a byte again, while new connections pass. That is a half-dead path — an apiserver
//! replica gone behind a load balancer, an expired NAT entry — where a client that opens a new
//! connection gets through but one that waits on its old ones waits forever. What a client wrote on a
//! frozen connection is never delivered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Which connections may move bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Path {
    /// Every connection is stopped.
    partitioned: bool,
    /// Connections numbered below this are stopped for good.
    frozen_below: u64,
}

impl Path {
    fn stalls(&self, connection: u64) -> bool {
        self.partitioned || connection < self.frozen_below
    }
}

/// A running proxy. Dropping it stops accepting and ends every connection it held frozen; the others
/// end with their peers.
pub struct BlackHoleProxy {
    port: u16,
    path: Arc<watch::Sender<Path>>,
    connections: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl BlackHoleProxy {
    /// Listens on a free 127.0.0.1 port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("binding the black-hole proxy")?;
        let port = listener.local_addr()?.port();
        let (path, _) = watch::channel(Path::default());
        let path = Arc::new(path);
        let connections = Arc::new(AtomicU64::new(0));
        let (state, numbering) = (path.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let connection = numbering.fetch_add(1, Ordering::SeqCst);
                let flowing = state.subscribe();
                tokio::spawn(async move {
                    if let Err(error) = relay(client, upstream, connection, flowing).await {
                        tracing::debug!(%error, "black-hole proxy connection ended");
                    }
                });
            }
        });
        Ok(Self {
            port,
            path,
            connections,
            accept,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `https://127.0.0.1:<port>`: the server URL a kubeconfig uses to go through the proxy.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Stops every byte, both ways, on every connection, without closing any.
    pub fn black_hole(&self) {
        self.path.send_modify(|path| path.partitioned = true);
    }

    /// Lets bytes flow again (on connections not frozen).
    pub fn heal(&self) {
        self.path.send_modify(|path| path.partitioned = false);
    }

    /// Stops every byte, both ways and for good, on the connections accepted so far, without closing
    /// them; connections accepted later pass.
    pub fn freeze_existing(&self) {
        let accepted = self.connections.load(Ordering::SeqCst);
        self.path.send_modify(|path| path.frozen_below = accepted);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for BlackHoleProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Waits while connection `connection` may not move bytes.
async fn flowing(state: &mut watch::Receiver<Path>, connection: u64) -> anyhow::Result<()> {
    state
        .wait_for(|path| !path.stalls(connection))
        .await
        .map(|_| ())
        .context("the proxy is gone")
}

async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    connection: u64,
    mut state: watch::Receiver<Path>,
) -> anyhow::Result<()> {
    flowing(&mut state, connection).await?;
    let server = TcpStream::connect(upstream)
        .await
        .with_context(|| format!("connecting to {upstream}"))?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, connection, state.clone());
    let down = pump(server_read, client_write, connection, state);
    // Either side closing ends the connection as a whole (HTTP clients do not half-close).
    tokio::select! {
        result = up => result,
        result = down => result,
    }
}

/// Copies `from` → `to`, but neither reads nor writes while partitioned: bytes already read are held
/// until the partition heals, and nothing more is read, so the sender's buffers fill as they would.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    connection: u64,
    mut state: watch::Receiver<Path>,
) -> anyhow::Result<()> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        flowing(&mut state, connection).await?;
        let read = tokio::select! {
            read = from.read(&mut buffer) => read?,
            // A partition or freeze that starts while we wait for bytes: stop reading at once.
            _ = state.wait_for(|path| path.stalls(connection)) => continue,
        };
        if read == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        flowing(&mut state, connection).await?;
        to.write_all(&buffer[..read]).await?;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Duration;

    /// A TCP server on 127.0.0.1 that sends back whatever it receives.
    pub(crate) async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    while let Ok(n) = socket.read(&mut buffer).await {
                        if n == 0 || socket.write_all(&buffer[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn holds_bytes_while_black_holed_and_delivers_them_after() {
        let proxy = BlackHoleProxy::start(echo_server().await)
            .await
            .expect("proxy");
        let mut socket = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect");
        let mut answer = [0u8; 5];
        socket.write_all(b"hello").await.expect("write");
        socket.read_exact(&mut answer).await.expect("echo");
        assert_eq!(&answer, b"hello");

        proxy.black_hole();
        socket.write_all(b"world").await.expect("write");
        let silent =
            tokio::time::timeout(Duration::from_millis(300), socket.read_exact(&mut answer)).await;
        assert!(silent.is_err(), "no answer through a black hole");

        proxy.heal();
        tokio::time::timeout(Duration::from_secs(5), socket.read_exact(&mut answer))
            .await
            .expect("answer after healing")
            .expect("read");
        assert_eq!(&answer, b"world");
    }

    #[tokio::test]
    async fn freezes_existing_connections_and_passes_new_ones() {
        let proxy = BlackHoleProxy::start(echo_server().await)
            .await
            .expect("proxy");
        let mut old = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect");
        let mut answer = [0u8; 5];
        old.write_all(b"hello").await.expect("write");
        old.read_exact(&mut answer).await.expect("echo");

        proxy.freeze_existing();
        old.write_all(b"stuck").await.expect("write");
        let silent =
            tokio::time::timeout(Duration::from_millis(300), old.read_exact(&mut answer)).await;
        assert!(silent.is_err(), "a frozen connection answers nothing");

        let mut new = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect");
        new.write_all(b"fresh").await.expect("write");
        tokio::time::timeout(Duration::from_secs(5), new.read_exact(&mut answer))
            .await
            .expect("a new connection passes")
            .expect("read");
        assert_eq!(&answer, b"fresh");
        assert_eq!(proxy.connections(), 2);

        // Healing a partition does not thaw a frozen connection.
        proxy.black_hole();
        proxy.heal();
        let silent =
            tokio::time::timeout(Duration::from_millis(300), old.read_exact(&mut answer)).await;
        assert!(silent.is_err(), "frozen for good");
    }
}
