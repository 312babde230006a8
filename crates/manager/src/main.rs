//! `kruise-manager`: see the library documentation and `kruise-manager --help`.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = kruise_manager::Args::parse();
    kruise_manager::init_logs(&args.log_format, args.verbosity);
    kruise_manager::run(args).await
}
