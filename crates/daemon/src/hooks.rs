//! preStop hooks of a recreated container, run by the daemon before it stops the container, as the
//! kubelet runs them: `exec` in the container through the CRI, `httpGet` against the Pod (or the given
//! host); `tcpSocket` is not a supported lifecycle hook (as in the kubelet).

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::containerrecreaterequest::ProbeHandler;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cri::Runtime;

pub async fn run_pre_stop(
    runtime: &Runtime,
    container_id: &str,
    pod_uid: &str,
    hook: &ProbeHandler,
    ports: &[ContainerPort],
    timeout: Duration,
) -> anyhow::Result<()> {
    if let Some(exec) = &hook.exec {
        let command = exec.command.clone().unwrap_or_default();
        let (code, output) = runtime
            .exec_sync(container_id, command, timeout)
            .await
            .context("exec preStop hook")?;
        if code != 0 {
            bail!("preStop command exited with {code}: {output}");
        }
        return Ok(());
    }
    if let Some(get) = &hook.http_get {
        let host = match get.host.clone().filter(|h| !h.is_empty()) {
            Some(host) => host,
            None => runtime
                .pod_ip(pod_uid)
                .await?
                .context("no Pod IP for the httpGet preStop hook")?,
        };
        let port = resolve_port(get, ports)?;
        return tokio::time::timeout(timeout, http_get(&host, port, get))
            .await
            .context("httpGet preStop hook timed out")?;
    }
    if hook.tcp_socket.is_some() {
        bail!("tcpSocket is not a supported lifecycle hook");
    }
    Ok(())
}

/// The port of an httpGet action: a number, or the name of one of the container's ports.
pub fn resolve_port(get: &HTTPGetAction, ports: &[ContainerPort]) -> anyhow::Result<u16> {
    let port = match &get.port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .with_context(|| format!("no container port named {name}"))?,
        },
    };
    u16::try_from(port).with_context(|| format!("invalid port {port}"))
}

async fn http_get(host: &str, port: u16, get: &HTTPGetAction) -> anyhow::Result<()> {
    if get
        .scheme
        .as_deref()
        .is_some_and(|s| !s.eq_ignore_ascii_case("HTTP"))
    {
        bail!("httpGet preStop hook: only the HTTP scheme is supported");
    }
    let path = get
        .path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/".to_owned());
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kruise-daemon\r\nConnection: close\r\n"
    );
    for header in get.http_headers.iter().flatten() {
        request.push_str(&format!("{}: {}\r\n", header.name, header.value));
    }
    request.push_str("\r\n");
    let mut stream = TcpStream::connect((host, port))
        .await
        .with_context(|| format!("connect to {host}:{port}"))?;
    stream.write_all(request.as_bytes()).await?;
    let mut head = [0u8; 64];
    let read = stream.read(&mut head).await?;
    let line = String::from_utf8_lossy(&head[..read]);
    if !line.starts_with("HTTP/") {
        bail!("httpGet preStop hook: no HTTP response from {host}:{port}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_resolve_by_number_and_name() {
        let ports = vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..Default::default()
        }];
        let get = |port| HTTPGetAction {
            port,
            ..Default::default()
        };
        assert_eq!(
            resolve_port(&get(IntOrString::Int(80)), &ports).ok(),
            Some(80)
        );
        assert_eq!(
            resolve_port(&get(IntOrString::String("http".into())), &ports).ok(),
            Some(8080)
        );
        assert_eq!(
            resolve_port(&get(IntOrString::String("81".into())), &ports).ok(),
            Some(81)
        );
        assert!(resolve_port(&get(IntOrString::String("nope".into())), &ports).is_err());
    }
}
