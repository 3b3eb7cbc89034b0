//! Compiles and runs `crates/brrr/src/perf_cmd.rs` (the `brrr roofline` / `brrr estimate`
//! commands) outside the `brrr` binary, so brrr-perf can check its CLI on its own:
//!
//! ```text
//! cargo run -p brrr-perf --example cli_check -- roofline --gpu h100 --op gemm:4096,4096,4096
//! cargo run -p brrr-perf --example cli_check -- estimate memory --model gpt2 --gpu rtx-4090
//! cargo run -p brrr-perf --example cli_check -- estimate time --params 175B --tokens 300B --gpus 1024
//! cargo run -p brrr-perf --example cli_check -- estimate comms --gpu h100 --gpus 16 --bytes 1GB
//! ```

#[path = "../../brrr/src/perf_cmd.rs"]
mod perf_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "brrr",
    about = "brrr-perf's commands, as the brrr binary wires them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Place ops on a GPU's roofline.
    Roofline(perf_cmd::RooflineArgs),
    /// Estimate memory, time or communication.
    Estimate(perf_cmd::EstimateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Roofline(a) => perf_cmd::run_roofline(a),
        Command::Estimate(a) => perf_cmd::run_estimate(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }
}
