//! The unit every transport moves: a header that says which collective, communicator,
//! dtype and buffer size the sender is in, and the payload. Receivers check the header
//! against their own call, which is how mismatched sizes or dtypes across ranks become
//! errors instead of silent garbage or a hang.

use crate::error::{CollError, Result};

/// Which operation a frame belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpCode {
    /// Point-to-point `send`/`recv`.
    SendRecv = 1,
    /// All-reduce.
    AllReduce = 2,
    /// Reduce-scatter.
    ReduceScatter = 3,
    /// All-gather.
    AllGather = 4,
    /// Broadcast.
    Broadcast = 5,
    /// All-to-all.
    AllToAll = 6,
    /// Barrier.
    Barrier = 7,
    /// The sender gave up; every receiver fails with [`CollError::PeerAborted`].
    Abort = 8,
}

impl OpCode {
    /// The name used in errors and reports.
    pub fn name(self) -> &'static str {
        match self {
            OpCode::SendRecv => "send/recv",
            OpCode::AllReduce => "all-reduce",
            OpCode::ReduceScatter => "reduce-scatter",
            OpCode::AllGather => "all-gather",
            OpCode::Broadcast => "broadcast",
            OpCode::AllToAll => "all-to-all",
            OpCode::Barrier => "barrier",
            OpCode::Abort => "abort",
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => OpCode::SendRecv,
            2 => OpCode::AllReduce,
            3 => OpCode::ReduceScatter,
            4 => OpCode::AllGather,
            5 => OpCode::Broadcast,
            6 => OpCode::AllToAll,
            7 => OpCode::Barrier,
            8 => OpCode::Abort,
            _ => return None,
        })
    }
}

/// What a frame says about the call it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The communicator (0 for the world, another id per sub-group).
    pub ctx: u32,
    /// The collective.
    pub op: OpCode,
    /// The dtype of the caller's data (`DType` as a small code; f32 payload regardless).
    pub dtype: u8,
    /// The length of the whole work buffer of the call, in elements: equal on every rank
    /// of a correct call.
    pub total: u64,
}

/// A header and its f32 payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// What the frame belongs to.
    pub header: Header,
    /// The elements.
    pub data: Vec<f32>,
}

/// Bytes of an encoded header: magic (4), ctx (4), op (1), dtype (1), pad (2), total (8),
/// payload length (8).
pub const HEADER_BYTES: usize = 28;
const MAGIC: [u8; 4] = *b"brrC";

impl Frame {
    /// The header as bytes, little-endian (the socket wire format).
    pub fn encode_header(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..4].copy_from_slice(&MAGIC);
        h[4..8].copy_from_slice(&self.header.ctx.to_le_bytes());
        h[8] = self.header.op as u8;
        h[9] = self.header.dtype;
        h[12..20].copy_from_slice(&self.header.total.to_le_bytes());
        h[20..28].copy_from_slice(&(self.data.len() as u64).to_le_bytes());
        h
    }

    /// Parses a header; returns it and the payload length in elements, which must not
    /// exceed `max_elems` (a hostile or corrupt length never becomes an allocation).
    pub fn decode_header(h: &[u8; HEADER_BYTES], max_elems: u64) -> Result<(Header, usize)> {
        let bad = |msg: String| CollError::setup("socket", msg);
        if h[0..4] != MAGIC {
            return Err(bad(format!("not a brrr frame (magic {:?})", &h[0..4])));
        }
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        let op = OpCode::from_u8(h[8]).ok_or_else(|| bad(format!("unknown op code {}", h[8])))?;
        let len = u64_at(20);
        if len > max_elems {
            return Err(bad(format!(
                "frame of {len} elements exceeds the limit of {max_elems}"
            )));
        }
        let header = Header {
            ctx: u32::from_le_bytes(h[4..8].try_into().expect("4 bytes")),
            op,
            dtype: h[9],
            total: u64_at(12),
        };
        Ok((header, len as usize))
    }

    /// The payload as little-endian bytes.
    pub fn payload_bytes(&self) -> Vec<u8> {
        self.data.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
}

/// A dtype as the one-byte code frames carry.
pub fn dtype_code(d: brrr_backend::DType) -> u8 {
    use brrr_backend::DType::*;
    match d {
        F32 => 0,
        F16 => 1,
        BF16 => 2,
        F64 => 3,
        I32 => 4,
        U32 => 5,
    }
}

/// The name of a dtype code, for errors.
pub fn dtype_name(code: u8) -> &'static str {
    match code {
        0 => "f32",
        1 => "f16",
        2 => "bf16",
        3 => "f64",
        4 => "i32",
        5 => "u32",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_lengths_are_bounded() {
        let f = Frame {
            header: Header {
                ctx: 7,
                op: OpCode::AllGather,
                dtype: 2,
                total: 1 << 40,
            },
            data: vec![1.0, 2.0, 3.0],
        };
        let h = f.encode_header();
        let (hd, n) = Frame::decode_header(&h, 3).unwrap();
        assert_eq!((hd, n), (f.header, 3));
        let err = Frame::decode_header(&h, 2).unwrap_err().to_string();
        assert!(err.contains("exceeds the limit"), "{err}");
        let mut junk = h;
        junk[0] = b'x';
        assert!(Frame::decode_header(&junk, 3).is_err());
    }
}
