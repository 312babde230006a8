//! A TCP proxy on 127.0.0.1 that delivers what its upstream sends late: every byte from the
//! upstream reaches the client a set lag after the proxy read it, in order; what the client sends
//! passes at once. Put in front of the apiserver, it makes a client's watches lag behind the
//! cluster as a slow network, a busy apiserver or a distant replica would (its own requests wait
//! for their answers as long).
//!
//! It runs on a thread of its own (its own runtime), so it serves every test of a binary, whichever
//! test's runtime started it, until the process exits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A running proxy; see the module docs.
pub struct LagProxy {
    port: u16,
    lag_micros: Arc<AtomicU64>,
}

impl LagProxy {
    /// Listens on a free 127.0.0.1 port and forwards every connection to `upstream`, with no lag
    /// until [`LagProxy::set_lag`].
    pub fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener =
            std::net::TcpListener::bind(("127.0.0.1", 0)).context("binding the lag proxy")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let lag_micros = Arc::new(AtomicU64::new(0));
        let lag = lag_micros.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("the lag proxy's runtime")?;
        std::thread::Builder::new()
            .name("lag-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    while let Ok((client, _)) = listener.accept().await {
                        let lag = lag.clone();
                        tokio::spawn(async move {
                            if let Err(error) = relay(client, upstream, lag).await {
                                tracing::debug!(%error, "lag proxy connection ended");
                            }
                        });
                    }
                });
            })
            .context("starting the lag proxy thread")?;
        Ok(Self { port, lag_micros })
    }

    /// `https://127.0.0.1:<port>`: the server URL a kubeconfig uses to go through the proxy.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Delivers what the upstream sends from now on `lag` late.
    pub fn set_lag(&self, lag: Duration) {
        let micros = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
        self.lag_micros.store(micros, Ordering::SeqCst);
    }
}

async fn relay(client: TcpStream, upstream: SocketAddr, lag: Arc<AtomicU64>) -> anyhow::Result<()> {
    let server = TcpStream::connect(upstream)
        .await
        .with_context(|| format!("connecting to {upstream}"))?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = async {
        tokio::io::copy(&mut client_read, &mut server_write).await?;
        anyhow::Ok(())
    };
    let (held, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read_down = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = server_read.read(&mut buffer).await?;
            if read == 0 {
                return anyhow::Ok(());
            }
            let lag = Duration::from_micros(lag.load(Ordering::SeqCst));
            if held
                .send((Instant::now() + lag, buffer[..read].to_vec()))
                .is_err()
            {
                return Ok(());
            }
        }
    };
    let write_down = async move {
        while let Some((at, bytes)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            client_write.write_all(&bytes).await?;
        }
        let _ = client_write.shutdown().await;
        anyhow::Ok(())
    };
    let down = async {
        let (read, write) = tokio::join!(read_down, write_down);
        read.and(write)
    };
    // Either side closing ends the connection as a whole (HTTP clients do not half-close).
    tokio::select! {
        result = up => result,
        result = down => result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_from_upstream_arrive_late_and_in_order() {
        let addr = crate::blackhole::tests::echo_server().await;
        let proxy = LagProxy::start(addr).expect("proxy");
        let port = proxy.port;
        let mut client = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        async fn echo(client: &mut TcpStream, text: &[u8]) -> Duration {
            let began = std::time::Instant::now();
            client.write_all(text).await.expect("write");
            let mut got = vec![0u8; text.len()];
            client.read_exact(&mut got).await.expect("read");
            assert_eq!(got, text);
            began.elapsed()
        }
        assert!(echo(&mut client, b"quick").await < Duration::from_millis(100));
        proxy.set_lag(Duration::from_millis(300));
        let late = echo(&mut client, b"late and in order").await;
        assert!(late >= Duration::from_millis(300), "{late:?}");
        assert!(late < Duration::from_secs(2), "{late:?}");
    }
}
