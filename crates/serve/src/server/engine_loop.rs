//! The engine's own thread. The HTTP side submits requests over a channel and receives
//! each request's tokens over a channel of its own; between commands the thread steps
//! the engine, so requests join and leave the batch at every step (continuous
//! batching), whoever sent them. A request whose receiver is gone (the client hung up,
//! or its handler timed out or hit a stop string) is ended before the next step, and
//! its KV blocks are free for the others.

use super::metrics::Metrics;
use crate::engine::LlmEngine;
use crate::sampling::SamplingParams;
use crate::scheduler::{FinishReason, SeqId};
use brrr_backend::{Backend, Error, Result};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// What the engine thread sends a request's handler.
#[derive(Debug)]
pub enum Event {
    /// A token; `finished` is set on the request's last one.
    Token {
        /// The token.
        token: u32,
        /// Why the request ended, on its last token.
        finished: Option<FinishReason>,
    },
    /// The request could not run (refused by the engine, or the engine failed).
    Failed(String),
}

struct Command {
    prompt: Vec<u32>,
    params: SamplingParams,
    events: UnboundedSender<Event>,
    done: Arc<AtomicBool>,
}

/// A submitted request, as its handler holds it. Dropping it cancels the request;
/// [`Submitted::finish`] ends it as finished (the handler saw a stop string).
pub struct Submitted {
    /// The request's tokens, as the engine produces them.
    pub events: UnboundedReceiver<Event>,
    done: Arc<AtomicBool>,
}

impl Submitted {
    /// Ends the request as finished rather than cancelled; the engine frees it before
    /// its next step.
    pub fn finish(self) {
        self.done.store(true, Relaxed);
    }
}

struct Client {
    done: Arc<AtomicBool>,
    events: UnboundedSender<Event>,
    arrived: Instant,
    ttft: Option<f64>,
    tokens: u64,
}

/// A running engine thread: how to reach it, and what it reports.
#[derive(Clone)]
pub struct EngineHandle {
    commands: UnboundedSender<Command>,
    /// The counters `/metrics` shows.
    pub metrics: Arc<Metrics>,
    /// The model's context length: prompt and output together stay below it.
    pub context: usize,
    /// The model's vocabulary size.
    pub vocab: usize,
}

impl EngineHandle {
    /// Builds the engine with `make` on a thread of its own and starts stepping it.
    /// The thread ends when every handle is dropped and no request is left.
    pub fn spawn<B, F>(make: F) -> Result<EngineHandle>
    where
        B: Backend,
        F: FnOnce() -> Result<LlmEngine<B>> + Send + 'static,
    {
        let (commands, rx) = unbounded_channel();
        let (ready, is_ready) = std::sync::mpsc::channel();
        let metrics = Arc::new(Metrics::default());
        let m = metrics.clone();
        std::thread::Builder::new()
            .name("brrr-engine".into())
            .spawn(move || match make() {
                Ok(engine) => {
                    let c = engine.model_config();
                    let _ = ready.send(Ok((c.block_size, c.vocab_size)));
                    run(engine, rx, &m);
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                }
            })
            .map_err(|e| Error::io("starting the engine thread", e))?;
        let (context, vocab) = is_ready
            .recv()
            .map_err(|_| Error::invalid("serve", "the engine thread ended before it started"))??;
        Ok(EngineHandle {
            commands,
            metrics,
            context,
            vocab,
        })
    }

    /// Queues a request; its tokens arrive on [`Submitted::events`].
    pub fn submit(&self, prompt: Vec<u32>, params: SamplingParams) -> Result<Submitted> {
        let (events, rx) = unbounded_channel();
        let done = Arc::new(AtomicBool::new(false));
        let command = Command {
            prompt,
            params,
            events,
            done: done.clone(),
        };
        self.commands
            .send(command)
            .map_err(|_| Error::invalid("serve", "the engine has stopped"))?;
        Ok(Submitted { events: rx, done })
    }
}

fn run<B: Backend>(mut engine: LlmEngine<B>, mut rx: UnboundedReceiver<Command>, m: &Metrics) {
    let mut clients: HashMap<SeqId, Client> = HashMap::new();
    let blocks = engine.scheduler().allocator().num_blocks() as u64;
    m.kv_blocks_total.store(blocks, Relaxed);
    loop {
        if engine.scheduler().num_unfinished() == 0 {
            // Idle: wait for work; no handle left and nothing to do is the end.
            match rx.blocking_recv() {
                Some(c) => command(&mut engine, &mut clients, c, m),
                None => return,
            }
        }
        while let Ok(c) = rx.try_recv() {
            command(&mut engine, &mut clients, c, m);
        }
        let gone: Vec<SeqId> = clients
            .iter()
            .filter(|(_, c)| c.events.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            end(&mut engine, &mut clients, id, m);
        }
        if engine.scheduler().num_unfinished() > 0 {
            match engine.step() {
                Ok(outputs) => {
                    for o in outputs {
                        deliver(&mut engine, &mut clients, o.id, o.token, o.finished, m);
                    }
                }
                Err(e) => fail_all(&mut engine, &mut clients, &e.to_string(), m),
            }
        }
        gauges(&engine, m);
    }
}

fn command<B: Backend>(
    engine: &mut LlmEngine<B>,
    clients: &mut HashMap<SeqId, Client>,
    c: Command,
    m: &Metrics,
) {
    let Command {
        prompt,
        params,
        events,
        done,
    } = c;
    let n = prompt.len() as u64;
    match engine.add_request(prompt, params) {
        Ok(id) => {
            m.requests.fetch_add(1, Relaxed);
            m.prompt_tokens.fetch_add(n, Relaxed);
            let client = Client {
                done,
                events,
                arrived: Instant::now(),
                ttft: None,
                tokens: 0,
            };
            clients.insert(id, client);
        }
        // The handler answers 400 and counts the rejection.
        Err(e) => {
            let _ = events.send(Event::Failed(e.to_string()));
        }
    }
}

/// Ends request `id` before its last token, its handler gone: finished if the handler
/// said so (a stop string), else cancelled.
fn end<B: Backend>(
    engine: &mut LlmEngine<B>,
    clients: &mut HashMap<SeqId, Client>,
    id: SeqId,
    m: &Metrics,
) {
    let _ = engine.abort(id);
    let _ = engine.take_output(id);
    if let Some(c) = clients.remove(&id) {
        match c.done.load(Relaxed) {
            true => {
                m.finished.fetch_add(1, Relaxed);
                let total = c.arrived.elapsed().as_secs_f64();
                m.request_done(c.tokens, c.ttft.unwrap_or(total), total);
            }
            false => {
                m.aborted.fetch_add(1, Relaxed);
            }
        }
    }
}

fn deliver<B: Backend>(
    engine: &mut LlmEngine<B>,
    clients: &mut HashMap<SeqId, Client>,
    id: SeqId,
    token: u32,
    finished: Option<FinishReason>,
    m: &Metrics,
) {
    let Some(c) = clients.get_mut(&id) else {
        return;
    };
    c.tokens += 1;
    m.generated_tokens.fetch_add(1, Relaxed);
    let now = c.arrived.elapsed().as_secs_f64();
    if c.ttft.is_none() {
        c.ttft = Some(now);
        m.first_token(now);
    }
    if c.events.send(Event::Token { token, finished }).is_err() {
        end(engine, clients, id, m);
    } else if finished.is_some() {
        let _ = engine.take_output(id);
        if let Some(c) = clients.remove(&id) {
            m.finished.fetch_add(1, Relaxed);
            m.request_done(c.tokens, c.ttft.unwrap_or(now), now);
        }
    }
}

/// The engine failed a step: every request ends with the error, none is left running.
fn fail_all<B: Backend>(
    engine: &mut LlmEngine<B>,
    clients: &mut HashMap<SeqId, Client>,
    message: &str,
    m: &Metrics,
) {
    for (id, c) in clients.drain() {
        let _ = c
            .events
            .send(Event::Failed(format!("the engine failed: {message}")));
        let _ = engine.abort(id);
        let _ = engine.take_output(id);
        m.aborted.fetch_add(1, Relaxed);
    }
}

fn gauges<B: Backend>(engine: &LlmEngine<B>, m: &Metrics) {
    let s = engine.scheduler();
    m.running.store(s.num_running() as u64, Relaxed);
    m.waiting.store(s.num_waiting() as u64, Relaxed);
    m.kv_blocks_used
        .store(s.allocator().num_used() as u64, Relaxed);
    m.prefix_hit_tokens.store(s.prefix_hit_tokens, Relaxed);
    m.preemptions.store(s.preemptions, Relaxed);
}
