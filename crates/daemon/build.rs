//! Generates the CRI v1 client from `third_party/cri-api/runtime/v1/api.proto` (k8s.io/cri-api v0.34,
//! as Kubernetes publishes it, unchanged), compiled by protox, so no `protoc` is needed on the build
//! machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "third_party/cri-api/runtime/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["third_party/cri-api"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
