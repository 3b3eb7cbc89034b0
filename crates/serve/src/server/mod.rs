//! `brrr serve`'s HTTP server (feature `http`): an OpenAI-compatible
//! `POST /v1/completions` (whole or streamed as server-sent events), `GET /health` and
//! `GET /metrics` (Prometheus text), on axum and tokio, in front of one [`LlmEngine`]
//! stepping on its own thread ([`EngineHandle`]).
//!
//! Every limit answers with a 4xx and a JSON body `{"error": {"message", "type"}}`: a
//! body over `max_body_bytes` (413), JSON that is not a completion request, an empty or
//! too long prompt, too many tokens asked, bad sampling values (400), more than
//! `max_concurrent` requests at once (429), a request running past `timeout` (504, or an
//! error event when streaming). A client that goes away mid-stream drops its channel,
//! and the engine cancels the request before its next step, freeing its KV blocks.
//! [`serve`] stops on a signal future: no new connections, and requests in flight run
//! to their end.
//!
//! [`LlmEngine`]: crate::LlmEngine

pub mod api;
mod engine_loop;
pub mod metrics;

pub use engine_loop::{EngineHandle, Event, Submitted};
pub use metrics::Metrics;

use api::{Choice, Completion, CompletionRequest, TextStream, Usage, finish_name};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

/// Text to tokens and back: the served model's tokenizer.
pub trait Tokenizer: Send + Sync {
    /// The tokens of `text`.
    fn encode(&self, text: &str) -> Vec<u32>;
    /// The text of `tokens` (lossy where they are not whole characters).
    fn decode(&self, tokens: &[u32]) -> String;
}

/// The server's name for its model and its limits.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The `model` field of responses.
    pub model_name: String,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Largest `max_tokens` a request may ask for.
    pub max_tokens: usize,
    /// Requests in flight at once at most; more are answered 429.
    pub max_concurrent: usize,
    /// Longest a request may run, from arrival to its last token.
    pub timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            model_name: "brrr".into(),
            max_body_bytes: 1 << 20,
            max_tokens: 1024,
            max_concurrent: 64,
            timeout: Duration::from_secs(300),
        }
    }
}

#[derive(Clone)]
struct AppState {
    engine: EngineHandle,
    tokenizer: Arc<dyn Tokenizer>,
    config: Arc<ServerConfig>,
    permits: Arc<Semaphore>,
    next_key: Arc<AtomicU64>,
}

/// The routes, over a started engine.
pub fn router(engine: EngineHandle, tokenizer: Arc<dyn Tokenizer>, config: ServerConfig) -> Router {
    let state = AppState {
        engine,
        tokenizer,
        permits: Arc::new(Semaphore::new(config.max_concurrent)),
        next_key: Arc::new(AtomicU64::new(0)),
        config: Arc::new(config.clone()),
    };
    Router::new()
        .route("/v1/completions", post(completions))
        .route(
            "/health",
            get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, ROUTES) })
        .method_not_allowed_fallback(|| async { error(StatusCode::METHOD_NOT_ALLOWED, ROUTES) })
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state)
}

/// What a wrong route or method is told.
const ROUTES: &str = "the routes are POST /v1/completions, GET /health and GET /metrics";

/// Serves `router` on `listener` until `shutdown` completes; requests in flight then
/// run to their end.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let kind = match status {
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        s if s.is_server_error() => "server_error",
        _ => "invalid_request_error",
    };
    let body = serde_json::json!({"error": {"message": message.into(), "type": kind}});
    (status, axum::Json(body)).into_response()
}

async fn metrics(State(s): State<AppState>) -> Response {
    let text = s.engine.metrics.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

impl AppState {
    fn reject(&self, status: StatusCode, message: impl Into<String>) -> Response {
        self.engine.metrics.rejected.fetch_add(1, Relaxed);
        error(status, message)
    }

    /// The request's tokens, or why it is refused (a 400).
    fn check(&self, req: &CompletionRequest) -> Result<Vec<u32>, String> {
        let prompt = self.tokenizer.encode(&req.prompt);
        let (ctx, limit) = (self.engine.context, self.config.max_tokens);
        let problem = if prompt.is_empty() {
            Some("the prompt is empty".to_string())
        } else if prompt.len() >= ctx {
            Some(format!(
                "the prompt has {} tokens; the model's context is {ctx}",
                prompt.len()
            ))
        } else if req.max_tokens == 0 || req.max_tokens > limit {
            Some(format!(
                "max_tokens must be 1 to {limit}, got {}",
                req.max_tokens
            ))
        } else {
            req.params().validate().err()
        };
        match problem {
            Some(p) => Err(p),
            None => Ok(prompt),
        }
    }

    fn completion(&self, key: u64, choice: Choice, usage: Option<Usage>) -> Completion {
        Completion {
            id: format!("cmpl-{key}"),
            object: "text_completion".into(),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            model: self.config.model_name.clone(),
            choices: vec![choice],
            usage,
        }
    }
}

async fn completions(State(s): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return s.reject(e.status(), e.body_text()),
    };
    let req: CompletionRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return s.reject(
                StatusCode::BAD_REQUEST,
                format!("the body is not a completion request: {e}"),
            );
        }
    };
    let prompt = match s.check(&req) {
        Ok(p) => p,
        Err(problem) => return s.reject(StatusCode::BAD_REQUEST, problem),
    };
    let Ok(permit) = s.permits.clone().try_acquire_owned() else {
        let n = s.config.max_concurrent;
        return s.reject(
            StatusCode::TOO_MANY_REQUESTS,
            format!("{n} requests are running, the most this server takes at once"),
        );
    };
    let key = s.next_key.fetch_add(1, Relaxed);
    let prompt_tokens = prompt.len();
    let request = match s.engine.submit(prompt, req.params()) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let run = Run {
        s,
        key,
        prompt_tokens,
        stops: req.stops(),
        request: Some(request),
        permit,
    };
    match req.stream {
        true => run.stream(),
        false => run.whole().await,
    }
}

/// One accepted request: its engine channel and the concurrency slot it holds.
struct Run {
    s: AppState,
    key: u64,
    prompt_tokens: usize,
    stops: Vec<String>,
    /// `None` once finished by a stop string.
    request: Option<Submitted>,
    permit: OwnedSemaphorePermit,
}

/// What a run produced next.
enum Step {
    /// New text.
    Text(String),
    /// The end: the last text and OpenAI's finish reason.
    Done(String, &'static str),
    /// An error to report.
    Failed(StatusCode, String),
}

impl Run {
    /// Waits for the next piece of text (until the request's deadline).
    async fn next<D: Fn(&[u32]) -> String>(
        &mut self,
        text: &mut TextStream<D>,
        deadline: Instant,
    ) -> Step {
        loop {
            let Some(request) = self.request.as_mut() else {
                let m = "the request has ended";
                return Step::Failed(StatusCode::INTERNAL_SERVER_ERROR, m.into());
            };
            let event = match tokio::time::timeout_at(deadline, request.events.recv()).await {
                Ok(Some(e)) => e,
                Ok(None) => {
                    return Step::Failed(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the engine stopped".into(),
                    );
                }
                Err(_) => {
                    let secs = self.s.config.timeout.as_secs_f64();
                    return Step::Failed(
                        StatusCode::GATEWAY_TIMEOUT,
                        format!("the request ran past the server's {secs} s limit"),
                    );
                }
            };
            match event {
                Event::Failed(m) => return Step::Failed(StatusCode::BAD_REQUEST, m),
                Event::Token { token, finished } => {
                    let (piece, stopped) = text.push(token);
                    if stopped {
                        if let Some(r) = self.request.take() {
                            r.finish();
                        }
                        return Step::Done(piece, "stop");
                    }
                    if let Some(reason) = finished {
                        return Step::Done(piece + &text.flush(), finish_name(reason));
                    }
                    if !piece.is_empty() {
                        return Step::Text(piece);
                    }
                }
            }
        }
    }

    fn text(&self) -> TextStream<impl Fn(&[u32]) -> String + Send + 'static> {
        let tokenizer = self.s.tokenizer.clone();
        TextStream::new(move |t: &[u32]| tokenizer.decode(t), self.stops.clone())
    }

    fn usage(&self, completion_tokens: usize) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens,
            total_tokens: self.prompt_tokens + completion_tokens,
        }
    }

    /// The whole completion as one JSON body.
    async fn whole(mut self) -> Response {
        let deadline = Instant::now() + self.s.config.timeout;
        let mut text = self.text();
        let mut out = String::new();
        loop {
            match self.next(&mut text, deadline).await {
                Step::Text(piece) => out.push_str(&piece),
                Step::Done(piece, reason) => {
                    out.push_str(&piece);
                    let choice = Choice {
                        text: out,
                        index: 0,
                        finish_reason: Some(reason.into()),
                    };
                    let usage = Some(self.usage(text.tokens()));
                    return axum::Json(self.s.completion(self.key, choice, usage)).into_response();
                }
                Step::Failed(status, m) => return error(status, m),
            }
        }
    }

    /// Server-sent events: a chunk per piece of text, the last with its finish reason
    /// and usage, then `[DONE]`. A task feeds them; when the client goes away the task
    /// ends, dropping the engine channel, which cancels the request.
    fn stream(self) -> Response {
        let (tx, rx) = mpsc::channel::<Result<SseEvent, Infallible>>(16);
        tokio::spawn(async move {
            let mut run = self;
            let deadline = Instant::now() + run.s.config.timeout;
            let mut text = run.text();
            loop {
                let (piece, reason, usage) = match run.next(&mut text, deadline).await {
                    Step::Text(p) => (p, None, None),
                    Step::Done(p, r) => (p, Some(r.to_string()), Some(run.usage(text.tokens()))),
                    Step::Failed(_, m) => {
                        let body =
                            serde_json::json!({"error": {"message": m, "type": "server_error"}});
                        let _ = tx
                            .send(Ok(SseEvent::default().data(body.to_string())))
                            .await;
                        break;
                    }
                };
                let done = reason.is_some();
                let choice = Choice {
                    text: piece,
                    index: 0,
                    finish_reason: reason,
                };
                let chunk = run.s.completion(run.key, choice, usage);
                let data = serde_json::to_string(&chunk).unwrap_or_default();
                if tx.send(Ok(SseEvent::default().data(data))).await.is_err() {
                    return;
                }
                if done {
                    let _ = tx.send(Ok(SseEvent::default().data("[DONE]"))).await;
                    break;
                }
            }
            drop(run.permit);
        });
        Sse::new(ReceiverStream::new(rx))
            .keep_alive(KeepAlive::default())
            .into_response()
    }
}
