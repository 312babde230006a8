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

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy. Dropping it stops accepting; connections end with their peers.
pub struct BlackHoleProxy {
    port: u16,
    partitioned: Arc<watch::Sender<bool>>,
    accept: tokio::task::JoinHandle<()>,
}

impl BlackHoleProxy {
    /// Listens on a free 127.0.0.1 port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("binding the black-hole proxy")?;
        let port = listener.local_addr()?.port();
        let (partitioned, _) = watch::channel(false);
        let partitioned = Arc::new(partitioned);
        let state = partitioned.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let flowing = state.subscribe();
                tokio::spawn(async move {
                    if let Err(error) = relay(client, upstream, flowing).await {
                        tracing::debug!(%error, "black-hole proxy connection ended");
                    }
                });
            }
        });
        Ok(Self {
            port,
            partitioned,
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
        self.partitioned.send_replace(true);
    }

    /// Lets bytes flow again.
    pub fn heal(&self) {
        self.partitioned.send_replace(false);
    }
}

impl Drop for BlackHoleProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Waits while the network is partitioned.
async fn flowing(state: &mut watch::Receiver<bool>) -> anyhow::Result<()> {
    state
        .wait_for(|partitioned| !partitioned)
        .await
        .map(|_| ())
        .context("the proxy is gone")
}

async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    mut state: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    flowing(&mut state).await?;
    let server = TcpStream::connect(upstream)
        .await
        .with_context(|| format!("connecting to {upstream}"))?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, state.clone());
    let down = pump(server_read, client_write, state);
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
    mut state: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        flowing(&mut state).await?;
        let read = tokio::select! {
            read = from.read(&mut buffer) => read?,
            // A partition that starts while we wait for bytes: stop reading at once.
            _ = state.wait_for(|partitioned| *partitioned) => continue,
        };
        if read == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        flowing(&mut state).await?;
        to.write_all(&buffer[..read]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn echo_server() -> SocketAddr {
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
}
