//! Writes the apps.kruise.io CRDs generated from the Rust types into a folder (default `config/crd`).
//! `make manifests` runs it; a test fails when the checked-in files differ from what the types generate.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "config/crd".into()),
    );
    std::fs::create_dir_all(&dir)?;
    for crd in kruise_api::crd::all() {
        let path = dir.join(kruise_api::crd::file_name(&crd));
        std::fs::write(&path, kruise_api::crd::to_yaml(&crd)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
