//! A TCP balancer on 127.0.0.1: each connection goes to the next of its upstreams in turn, as a
//! Service's kube-proxy spreads connections over a Deployment's replicas. It counts the
//! connections each upstream got.
//!
//! It runs on a thread of its own (its own runtime), so it serves every test of a binary, whichever
//! test's runtime started it, until the process exits.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};

/// The upstreams and the connections each got.
#[derive(Default)]
struct Upstreams {
    addresses: Vec<SocketAddr>,
    connections: Vec<usize>,
    next: usize,
}

/// A running balancer; see the module docs.
pub struct Balancer {
    port: u16,
    upstreams: Arc<Mutex<Upstreams>>,
}

impl Balancer {
    /// Listens on a free 127.0.0.1 port; connections are closed until [`Balancer::set_upstreams`].
    pub fn start() -> anyhow::Result<Self> {
        let listener =
            std::net::TcpListener::bind(("127.0.0.1", 0)).context("binding the balancer")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let upstreams: Arc<Mutex<Upstreams>> = Arc::default();
        let shared = upstreams.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("the balancer's runtime")?;
        std::thread::Builder::new()
            .name("balancer".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    while let Ok((mut client, _)) = listener.accept().await {
                        let upstream = {
                            let mut u = shared.lock().unwrap_or_else(|e| e.into_inner());
                            if u.addresses.is_empty() {
                                continue;
                            }
                            let i = u.next % u.addresses.len();
                            u.next += 1;
                            u.connections[i] += 1;
                            u.addresses[i]
                        };
                        tokio::spawn(async move {
                            if let Ok(mut server) = TcpStream::connect(upstream).await {
                                let _ =
                                    tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            }
                        });
                    }
                });
            })
            .context("starting the balancer thread")?;
        Ok(Self { port, upstreams })
    }

    /// Hands the next connections to `addresses` in turn (counts start again).
    pub fn set_upstreams(&self, addresses: Vec<SocketAddr>) {
        let mut u = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
        u.connections = vec![0; addresses.len()];
        u.addresses = addresses;
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections handed to each upstream so far, in the order given.
    pub fn connections(&self) -> Vec<usize> {
        self.upstreams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .connections
            .clone()
    }
}
