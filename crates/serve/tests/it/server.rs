//! The HTTP server over loopback, with a plain HTTP/1.1 client on `std::net`: answers
//! equal to the engine's, streams equal to whole answers, 4xx JSON for bad requests,
//! blocks freed when clients leave, a concurrency limit, stop strings, a load of mixed
//! clients, and a graceful stop.

use brrr_cpu::CpuBackend;
use brrr_nn::{DType, Gpt, GptConfig};
use brrr_serve::server::{EngineHandle, ServerConfig, Tokenizer, router, serve};
use brrr_serve::{EngineConfig, LlmEngine, SamplingParams};
use rand::SeedableRng;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ALPHABET: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .";

/// One character a token, 64 of them.
struct Chars;

impl Tokenizer for Chars {
    fn encode(&self, text: &str) -> Vec<u32> {
        text.chars()
            .map(|c| ALPHABET.find(c).unwrap_or(62) as u32)
            .collect()
    }
    fn decode(&self, tokens: &[u32]) -> String {
        tokens
            .iter()
            .map(|&t| ALPHABET.as_bytes()[t as usize % 64] as char)
            .collect()
    }
}

fn gpt(block_size: usize, n_embd: usize) -> Gpt<CpuBackend> {
    let config = GptConfig {
        vocab_size: 64,
        block_size,
        n_layer: 2,
        n_head: 2,
        n_embd,
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    Gpt::new(&CpuBackend::new(), config, DType::F32, &mut rng).unwrap()
}

fn engine_config() -> EngineConfig {
    EngineConfig {
        block_size: 8,
        num_blocks: 512,
        max_seqs: 16,
        ..EngineConfig::default()
    }
}

/// A server on a free loopback port, stopped (gracefully) when dropped.
struct TestServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<std::sync::Mutex<std::sync::mpsc::Receiver<std::io::Result<()>>>>,
    _runtime: tokio::runtime::Runtime,
}

impl TestServer {
    /// `big`: a model whose requests take long enough to leave in the middle of.
    fn start(config: ServerConfig, big: bool) -> Self {
        let handle = EngineHandle::spawn(move || {
            let model = if big { gpt(512, 128) } else { gpt(48, 32) };
            LlmEngine::new(model, engine_config())
        })
        .unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done) = std::sync::mpsc::channel();
        let app = router(handle, Arc::new(Chars), config);
        runtime.spawn(async move {
            let r = serve(listener, app, async {
                let _ = stopped.await;
            })
            .await;
            let _ = done_tx.send(r);
        });
        TestServer {
            addr,
            stop: Some(stop),
            done: Some(std::sync::Mutex::new(done)),
            _runtime: runtime,
        }
    }

    /// Stops accepting and waits for the server to finish what is in flight.
    fn stop(&mut self) -> std::io::Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.done.take() {
            Some(d) => d
                .into_inner()
                .unwrap()
                .recv_timeout(Duration::from_secs(30))
                .unwrap(),
            None => Ok(()),
        }
    }

    fn connect(&self, method: &str, path: &str, body: &str) -> TcpStream {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        s
    }

    /// Status and body (de-chunked) of one request.
    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let mut raw = Vec::new();
        self.connect(method, path, body)
            .read_to_end(&mut raw)
            .unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let status = head[9..12].parse().unwrap();
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        (
            status,
            if chunked {
                dechunk(body)
            } else {
                body.to_string()
            },
        )
    }

    fn complete(&self, body: Value) -> (u16, Value) {
        let (status, text) = self.request("POST", "/v1/completions", &body.to_string());
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A streamed completion's `data:` payloads.
    fn stream(&self, mut body: Value) -> Vec<String> {
        body["stream"] = Value::Bool(true);
        let (status, text) = self.request("POST", "/v1/completions", &body.to_string());
        assert_eq!(status, 200, "{text}");
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }

    fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.request("GET", "/metrics", "");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not in {text}"))
            .parse()
            .unwrap()
    }

    /// Waits until the engine holds no request and no block (or fails after 30 s).
    fn wait_idle(&self) {
        let t0 = Instant::now();
        while self.metric("brrr_kv_blocks_used") > 0.0
            || self.metric("brrr_requests_running") > 0.0
            || self.metric("brrr_requests_waiting") > 0.0
        {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the engine never went idle"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn dechunk(body: &str) -> String {
    let (mut out, mut rest) = (String::new(), body);
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}

/// Greedy text of the engine itself, without a server.
fn reference(prompt: &str, tokens: usize) -> String {
    let mut engine = LlmEngine::new(gpt(48, 32), engine_config()).unwrap();
    let ids = Chars.encode(prompt);
    let out = engine
        .generate(&[ids], &SamplingParams::greedy(tokens))
        .unwrap();
    Chars.decode(&out[0])
}

fn greedy(prompt: &str, max_tokens: usize) -> Value {
    serde_json::json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
}

const PROMPTS: [&str; 4] = ["a", "hello world", "The 3 little pigs.", "xyz"];

#[test]
fn completions_are_the_engines_tokens_whole_or_streamed() {
    let server = TestServer::start(ServerConfig::default(), false);
    for p in PROMPTS {
        let want = reference(p, 12);
        let (status, body) = server.complete(greedy(p, 12));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["choices"][0]["text"], want.as_str(), "{p:?}");
        assert_eq!(body["choices"][0]["finish_reason"], "length");
        assert_eq!(body["usage"]["completion_tokens"], 12);
        assert_eq!(body["usage"]["prompt_tokens"], p.chars().count());
        let events = server.stream(greedy(p, 12));
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let text: String = chunks
            .iter()
            .map(|c| c["choices"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, want);
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "length"
        );
    }
    let (status, body) = server.request("GET", "/health", "");
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
    server.wait_idle();
    assert_eq!(server.metric("brrr_requests_finished_total"), 8.0);
}

#[test]
fn bad_requests_get_a_4xx_with_a_json_error() {
    let config = ServerConfig {
        max_body_bytes: 1024,
        max_tokens: 20,
        ..ServerConfig::default()
    };
    let server = TestServer::start(config, false);
    let cases: Vec<(String, u16, &str)> = vec![
        (r#"{"prompt": "ab""#.into(), 400, "not a completion request"),
        (r#"{"max_tokens": 3}"#.into(), 400, "prompt"),
        (r#"{"prompt": ""}"#.into(), 400, "empty"),
        (greedy(&"a".repeat(48), 3).to_string(), 400, "context is 48"),
        (
            greedy("ab", 21).to_string(),
            400,
            "max_tokens must be 1 to 20",
        ),
        (greedy("ab", 0).to_string(), 400, "max_tokens"),
        (
            r#"{"prompt": "ab", "temperature": -1}"#.into(),
            400,
            "temperature",
        ),
        (r#"{"prompt": "ab", "top_p": 0}"#.into(), 400, "top_p"),
        (
            format!(r#"{{"prompt": "{}"}}"#, "a".repeat(2000)),
            413,
            "length limit",
        ),
    ];
    for (body, want, words) in &cases {
        let (status, text) = server.request("POST", "/v1/completions", body);
        assert_eq!(status, *want, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{body}: {message}");
    }
    let (status, text) = server.request("GET", "/v2/nothing", "");
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("POST /v1/completions"), "{text}");
    let (status, text) = server.request("GET", "/v1/completions", "");
    assert_eq!(status, 405, "{text}");
    assert!(text.contains("\"error\""), "{text}");
    assert_eq!(
        server.metric("brrr_requests_rejected_total"),
        cases.len() as f64
    );
    assert_eq!(server.metric("brrr_requests_total"), 0.0);
}

/// Opens a long stream and reads until its first token has arrived.
fn start_stream(server: &TestServer, prompt: &str) -> BufReader<TcpStream> {
    let body =
        serde_json::json!({"prompt": prompt, "max_tokens": 500, "temperature": 0, "stream": true});
    let mut r = BufReader::new(server.connect("POST", "/v1/completions", &body.to_string()));
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "the stream ended early"
        );
    }
    r
}

#[test]
fn a_client_that_leaves_mid_stream_frees_its_blocks() {
    let config = ServerConfig {
        max_tokens: 500,
        ..ServerConfig::default()
    };
    let server = TestServer::start(config, true);
    let stream = start_stream(&server, "abc");
    drop(stream);
    server.wait_idle();
    assert_eq!(server.metric("brrr_requests_aborted_total"), 1.0);
    assert!(server.metric("brrr_generation_tokens_total") < 500.0);
    // The server goes on serving.
    let (status, _) = server.complete(greedy("abc", 3));
    assert_eq!(status, 200);
}

#[test]
fn over_the_concurrency_limit_is_429() {
    let config = ServerConfig {
        max_concurrent: 1,
        max_tokens: 500,
        ..ServerConfig::default()
    };
    let server = TestServer::start(config, true);
    let held = start_stream(&server, "abc");
    let (status, body) = server.complete(greedy("abc", 3));
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1 requests are running")
    );
    drop(held);
    server.wait_idle();
    let t0 = Instant::now();
    // The slot is free once the cancelled stream's task has ended.
    loop {
        let (status, _) = server.complete(greedy("abc", 3));
        if status == 200 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the slot was never freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn stop_strings_cut_the_text_and_finish_the_request() {
    let server = TestServer::start(ServerConfig::default(), false);
    let full = reference("hello world", 16);
    let stop = &full[4..6];
    let at = full.find(stop).unwrap();
    let mut body = greedy("hello world", 16);
    body["stop"] = Value::String(stop.into());
    let (status, v) = server.complete(body.clone());
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["text"], &full[..at]);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let text: String = server.stream(body)[..]
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| {
            let c: Value = serde_json::from_str(e).unwrap();
            c["choices"][0]["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(text, &full[..at]);
    server.wait_idle();
    assert_eq!(server.metric("brrr_requests_aborted_total"), 0.0);
    assert_eq!(server.metric("brrr_requests_finished_total"), 2.0);
}

/// 240 requests from 16 threads: 5% malformed, 5% leaving mid-stream, the rest whole
/// greedy completions checked against the engine. Nothing is lost or duplicated and
/// every block is free at the end.
#[test]
fn a_load_of_mixed_clients_loses_nothing() {
    let server = Arc::new(TestServer::start(ServerConfig::default(), false));
    let want: Vec<String> = PROMPTS.iter().map(|p| reference(p, 10)).collect();
    let want = Arc::new(want);
    let (n, threads) = (240usize, 16usize);
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (server, want) = (server.clone(), want.clone());
            std::thread::spawn(move || {
                let mut counts = [0usize; 3]; // ok, rejected, left
                for i in (t..n).step_by(threads) {
                    let p = i % PROMPTS.len();
                    match i % 20 {
                        0 => {
                            let (status, _) = server.request("POST", "/v1/completions", "{\"prompt\": 3");
                            assert_eq!(status, 400);
                            counts[1] += 1;
                        }
                        10 => {
                            let body = serde_json::json!({"prompt": PROMPTS[p], "max_tokens": 30, "stream": true});
                            let mut s = server.connect("POST", "/v1/completions", &body.to_string());
                            let mut first = [0u8; 12];
                            s.read_exact(&mut first).unwrap();
                            assert_eq!(&first, b"HTTP/1.1 200");
                            counts[2] += 1;
                        }
                        _ => {
                            let (status, v) = server.complete(greedy(PROMPTS[p], 10));
                            assert_eq!(status, 200, "{v}");
                            assert_eq!(v["choices"][0]["text"], want[p].as_str());
                            counts[0] += 1;
                        }
                    }
                }
                counts
            })
        })
        .collect();
    let mut counts = [0usize; 3];
    for w in workers {
        for (c, x) in counts.iter_mut().zip(w.join().unwrap()) {
            *c += x;
        }
    }
    assert_eq!(counts, [216, 12, 12]);
    server.wait_idle();
    let accepted = server.metric("brrr_requests_total");
    let ended = server.metric("brrr_requests_finished_total")
        + server.metric("brrr_requests_aborted_total");
    assert_eq!(accepted, 228.0);
    assert_eq!(ended, accepted, "every accepted request ended exactly once");
    assert_eq!(server.metric("brrr_requests_rejected_total"), 12.0);
    assert_eq!(server.metric("brrr_kv_blocks_used"), 0.0);
}

#[test]
fn a_graceful_stop_lets_streams_in_flight_finish() {
    let config = ServerConfig {
        max_tokens: 500,
        ..ServerConfig::default()
    };
    let mut server = TestServer::start(config, true);
    let mut stream = start_stream(&server, "abc");
    let stopping = std::thread::scope(|s| {
        let h = s.spawn(|| server.stop());
        let mut rest = String::new();
        stream.read_to_string(&mut rest).unwrap();
        assert!(rest.contains("data: [DONE]"), "the stream was cut: {rest}");
        assert!(rest.contains("\"finish_reason\":\"length\""), "{rest}");
        h.join().unwrap()
    });
    stopping.unwrap();
    // Nothing listens any more.
    assert!(TcpStream::connect(server.addr).is_err());
}
