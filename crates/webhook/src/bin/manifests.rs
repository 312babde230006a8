//! Writes `config/webhook/manifests.yaml` (the webhook configurations, Service form).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "config/webhook/manifests.yaml".into());
    if let Some(parent) = std::path::Path::new(&path).parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(
        &path,
        kruise_webhook::configuration::manifests_yaml("kruise-system")?,
    )?;
    println!("wrote {path}");
    Ok(())
}
