//! The OpenAI-compatible completion request and response bodies, and the text a
//! request streams: tokens decoded as they come, held back while they might be the
//! start of a stop string or of a multi-byte character.

use crate::sampling::SamplingParams;
use crate::scheduler::FinishReason;
use serde::{Deserialize, Serialize};

/// One string or several (OpenAI's `stop`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `POST /v1/completions`'s body: OpenAI's fields brrr uses (others are ignored), with
/// OpenAI's defaults, and `top_k` and `seed` as extensions.
#[derive(Clone, Debug, Deserialize)]
pub struct CompletionRequest {
    /// The text to continue.
    pub prompt: String,
    /// Tokens to generate at most (default 16).
    #[serde(default = "sixteen")]
    pub max_tokens: usize,
    /// Softmax temperature (default 1; 0 is greedy).
    #[serde(default = "one")]
    pub temperature: f32,
    /// Nucleus sampling's mass (default 1: off).
    #[serde(default = "one")]
    pub top_p: f32,
    /// Sample among the k most likely tokens only (default 0: all).
    #[serde(default)]
    pub top_k: usize,
    /// The random stream's seed (default 0).
    #[serde(default)]
    pub seed: u64,
    /// Strings that end the completion (not included in it).
    #[serde(default)]
    pub stop: Option<OneOrMany>,
    /// Send tokens as server-sent events as they are generated.
    #[serde(default)]
    pub stream: bool,
}

fn sixteen() -> usize {
    16
}

fn one() -> f32 {
    1.0
}

impl CompletionRequest {
    /// The sampling parameters (without stop strings: the server applies those).
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            max_tokens: self.max_tokens,
            stop_tokens: Vec::new(),
            seed: self.seed,
        }
    }

    /// The stop strings, empty ones left out.
    pub fn stops(&self) -> Vec<String> {
        let all = match &self.stop {
            None => Vec::new(),
            Some(OneOrMany::One(s)) => vec![s.clone()],
            Some(OneOrMany::Many(v)) => v.clone(),
        };
        all.into_iter().filter(|s| !s.is_empty()).collect()
    }
}

/// One choice of a response or of a streamed chunk.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Choice {
    /// The text (a chunk's new text, when streaming).
    pub text: String,
    /// Always 0: one choice per request.
    pub index: usize,
    /// `"stop"` or `"length"` on the last one; `null` before.
    pub finish_reason: Option<String>,
}

/// Token counts of a request.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Both.
    pub total_tokens: usize,
}

/// A completion, or one streamed chunk of one (`usage` on the last only).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Completion {
    /// `cmpl-N`.
    pub id: String,
    /// `"text_completion"`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// One choice.
    pub choices: Vec<Choice>,
    /// Token counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// OpenAI's name for why a completion ended.
pub fn finish_name(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length | FinishReason::Context => "length",
        FinishReason::Aborted => "cancelled",
    }
}

/// A request's text as its tokens arrive.
pub struct TextStream<D: Fn(&[u32]) -> String> {
    decode: D,
    stops: Vec<String>,
    tokens: Vec<u32>,
    /// Bytes of the text already handed out.
    sent: usize,
}

impl<D: Fn(&[u32]) -> String> TextStream<D> {
    /// Text decoded by `decode`, cut before the first of `stops`.
    pub fn new(decode: D, stops: Vec<String>) -> Self {
        TextStream {
            decode,
            stops,
            tokens: Vec::new(),
            sent: 0,
        }
    }

    /// Tokens received.
    pub fn tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Adds a token; returns the text that is now certain, and whether a stop string
    /// appeared (the text then ends before it, and nothing more comes).
    pub fn push(&mut self, token: u32) -> (String, bool) {
        self.tokens.push(token);
        let text = (self.decode)(&self.tokens);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| text.find(s.as_str()))
            .min()
        {
            let out = text.get(self.sent..at).unwrap_or("").to_string();
            self.sent = at.max(self.sent);
            return (out, true);
        }
        // Hold back an incomplete character (decoded as U+FFFD for now) and the longest
        // end of the text that could still grow into a stop string.
        let mut keep = text.trim_end_matches('\u{fffd}').len();
        for s in &self.stops {
            let partial = (1..s.len())
                .rev()
                .filter(|&n| s.is_char_boundary(n))
                .find(|&n| text[..keep].ends_with(&s[..n]));
            if let Some(n) = partial {
                keep = keep.min(text[..keep].len() - n);
            }
        }
        let out = text.get(self.sent..keep).unwrap_or("").to_string();
        self.sent = keep.max(self.sent);
        (out, false)
    }

    /// The rest of the text, at the end of a request that stopped without a stop string.
    pub fn flush(&mut self) -> String {
        let text = (self.decode)(&self.tokens);
        let out = text.get(self.sent..).unwrap_or("").to_string();
        self.sent = text.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(tokens: &[u32]) -> String {
        String::from_utf8_lossy(&tokens.iter().map(|&t| t as u8).collect::<Vec<_>>()).into()
    }

    fn feed(stops: &[&str], text: &str) -> (Vec<String>, bool, String) {
        let stops = stops.iter().map(|s| s.to_string()).collect();
        let mut t = TextStream::new(bytes, stops);
        let mut pieces = Vec::new();
        for b in text.bytes() {
            let (piece, stop) = t.push(u32::from(b));
            pieces.push(piece);
            if stop {
                return (pieces, true, String::new());
            }
        }
        let rest = t.flush();
        (pieces, false, rest)
    }

    #[test]
    fn text_stops_before_the_stop_string_and_never_sends_part_of_it() {
        let (pieces, stopped, _) = feed(&["\n\n"], "ab\ncd\n\nef");
        assert!(stopped);
        assert_eq!(pieces.concat(), "ab\ncd");
        // The single newline was held until the next byte showed it was no stop.
        assert_eq!(pieces[2], "");
        assert_eq!(pieces[3], "\nc");
    }

    #[test]
    fn multi_byte_characters_come_out_whole() {
        let (pieces, stopped, rest) = feed(&[], "é!");
        assert!(!stopped);
        assert_eq!(pieces, vec!["", "é", "!"]);
        assert_eq!(rest, "");
        let (pieces, _, rest) = feed(&["xyz"], "abxy");
        assert_eq!(
            (pieces.concat(), rest),
            ("ab".to_string(), "xy".to_string())
        );
    }
}
