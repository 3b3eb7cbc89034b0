//! `brrr serve`: a trained run behind brrr-serve's HTTP server (an OpenAI-compatible
//! `/v1/completions`, `/health`, `/metrics`) until Ctrl-C or SIGTERM; requests in
//! flight then get `--grace-s` seconds to finish.

use crate::data::ByteTokenizer;
use crate::generate::EngineArgs;
use crate::sample::load_model;
use brrr_backend::{Error, Result};
use brrr_serve::LlmEngine;
use brrr_serve::server::{EngineHandle, ServerConfig, Tokenizer, router, serve};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Flags of `brrr serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// A run directory written by `brrr train`.
    pub dir: PathBuf,
    /// Address to listen on (loopback by default: nothing outside this machine).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: any free one, printed at start).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Requests in the batch at once at most (more wait in the queue).
    #[arg(long, default_value_t = 32)]
    pub max_seqs: usize,
    /// Requests in flight at once at most (more are answered 429).
    #[arg(long, default_value_t = 64)]
    pub max_concurrent: usize,
    /// Largest max_tokens a request may ask for.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: usize,
    /// Largest request body, in KiB.
    #[arg(long, default_value_t = 1024)]
    pub max_body_kib: usize,
    /// Longest a request may run, in seconds (then 504).
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
    /// Seconds requests in flight get to finish after Ctrl-C or SIGTERM.
    #[arg(long, default_value_t = 30)]
    pub grace_s: u64,
    /// The KV cache, the step budget and the weights' format.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl ServeArgs {
    /// The defaults for `dir` on a free loopback port, taking as many requests at once
    /// as a load generator sends (`brrr bench serve`).
    pub fn for_bench(dir: PathBuf) -> Result<Self> {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let dir = dir.to_string_lossy().to_string();
        let argv = ["serve", &dir, "--port", "0", "--max-concurrent", "4096"];
        <Flags as clap::Parser>::try_parse_from(argv)
            .map(|f| f.serve)
            .map_err(|e| Error::invalid("serve", e.to_string()))
    }
}

struct Bytes;

impl Tokenizer for Bytes {
    fn encode(&self, text: &str) -> Vec<u32> {
        ByteTokenizer.encode(text)
    }
    fn decode(&self, tokens: &[u32]) -> String {
        ByteTokenizer.decode(tokens)
    }
}

/// Resolves on Ctrl-C or, on Unix, SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs `brrr serve` until a stop signal; `ready` gets the address once listening.
pub fn run(args: &ServeArgs, ready: &mut dyn FnMut(&str)) -> Result<()> {
    // The model is built on the engine's thread: a model is not `Send`.
    let a = args.clone();
    let handle = EngineHandle::spawn(move || {
        let (mut model, cfg) = load_model(&a.dir, &mut ChaCha8Rng::seed_from_u64(0))?;
        a.engine.quantize(&mut model)?;
        let config = a.engine.config(cfg.model.block_size, a.max_seqs);
        LlmEngine::new(model, config)
    })?;
    let server = ServerConfig {
        model_name: args.dir.display().to_string(),
        max_body_bytes: args.max_body_kib.saturating_mul(1024),
        max_tokens: args.max_tokens,
        max_concurrent: args.max_concurrent.max(1),
        timeout: Duration::from_secs(args.timeout_s.max(1)),
    };
    let app = router(handle, Arc::new(Bytes), server);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the async runtime", e))?;
    let grace = Duration::from_secs(args.grace_s);
    runtime.block_on(async {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| Error::io(format!("listening on {addr}"), e))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("reading the bound address", e))?;
        ready(&format!("http://{local}"));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            stop_signal().await;
            let _ = stop.send(true);
        });
        let (mut a, mut b) = (stopped.clone(), stopped);
        let graceful = async move {
            let _ = a.wait_for(|&s| s).await;
        };
        tokio::select! {
            r = serve(listener, app, graceful) => r.map_err(|e| Error::io("serving", e)),
            _ = async move {
                let _ = b.wait_for(|&s| s).await;
                tokio::time::sleep(grace).await;
            } => Err(Error::invalid(
                "serve",
                format!("requests were still running {} s after the stop signal", grace.as_secs()),
            )),
        }
    })
}
