//! Checkpoints: named tensors plus string metadata in one safetensors file.
//!
//! [safetensors](https://huggingface.co/docs/safetensors) is an 8-byte little-endian
//! header length, a JSON header (`{"name": {"dtype", "shape", "data_offsets"}, ...,
//! "__metadata__": {string: string}}`) and the raw little-endian tensor bytes. It holds
//! no code, so loading a checkpoint cannot execute anything, and other tools (PyTorch,
//! candle, the `safetensors` Python package) read brrr checkpoints directly.
//!
//! Everything that is not a tensor (the step, the batch RNG state, the config as TOML,
//! the tokenizer, the corpus fingerprint) goes into the string metadata.
//!
//! Files are written atomically (`crate::atomic`, native only): a run killed while saving keeps
//! its previous checkpoint. Loading checks the header itself before handing the bytes
//! to the `safetensors` crate, so that a damaged file gives an error naming the file
//! and the tensor concerned (a truncated download, a file cut short by a full disk)
//! rather than a bare "invalid offset".
//!
//! Tensor bytes are written in the host's byte order, which on every target brrr
//! supports (x86-64, aarch64, wasm32) is little-endian, as safetensors requires.

#[cfg(not(target_arch = "wasm32"))]
use crate::atomic::write_atomic;
use brrr_backend::{DType, Error, HostData, Result};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A named tensor: name, data, shape (row-major). The data holds exactly the product
/// of the shape's dimensions elements (1 for the empty shape, a scalar).
pub type NamedTensor = (String, HostData, Vec<usize>);

/// What a checkpoint file holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    /// Sorted by name (safetensors files do not keep insertion order).
    pub tensors: Vec<NamedTensor>,
    /// The header's `__metadata__`: string keys to string values (for a training
    /// checkpoint, the step, the batch RNG state, the config as TOML, ...; see
    /// [`crate::state`]).
    pub metadata: BTreeMap<String, String>,
}

impl Checkpoint {
    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&NamedTensor> {
        self.tensors.iter().find(|t| t.0 == name)
    }

    /// The metadata value for `key`, or an error naming the key: a checkpoint without
    /// its step or RNG state cannot be resumed.
    pub fn meta(&self, key: &str) -> Result<&str> {
        self.metadata
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| Error::Parse(format!("checkpoint metadata has no key {key:?}")))
    }
}

fn to_st(dtype: DType) -> Dtype {
    match dtype {
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::I32 => Dtype::I32,
        DType::U32 => Dtype::U32,
    }
}

fn from_st(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::I32 => DType::I32,
        Dtype::U32 => DType::U32,
        _ => return None,
    })
}

/// brrr's dtype for a safetensors dtype name, or why not. Works on the name (not the
/// crate's `Dtype`) so that a name no version of the crate knows is reported as such.
fn from_st_name(name: &str) -> std::result::Result<DType, String> {
    Ok(match name {
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F32" => DType::F32,
        "F64" => DType::F64,
        "I32" => DType::I32,
        "U32" => DType::U32,
        "BOOL" | "F4" | "F6_E2M3" | "F6_E3M2" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0"
        | "F8_E4M3FNUZ" | "F8_E5M2FNUZ" | "I16" | "U16" | "C64" | "I64" | "U64" => {
            return Err(format!(
                "dtype {name} is valid safetensors but brrr reads only F16, BF16, F32, F64, I32 and U32"
            ));
        }
        _ => return Err(format!("unknown dtype {name:?}")),
    })
}

fn elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// The file's bytes for these tensors and metadata. Errors (naming the tensor) for a
/// shape that does not match the data length, a duplicate name, or the name
/// `__metadata__`, which the format reserves.
pub fn to_bytes(tensors: &[NamedTensor], metadata: &BTreeMap<String, String>) -> Result<Vec<u8>> {
    const OP: &str = "checkpoint::save";
    let mut seen = std::collections::HashSet::new();
    let mut views = Vec::with_capacity(tensors.len());
    for (name, data, shape) in tensors {
        if name == "__metadata__" {
            return Err(Error::invalid(
                OP,
                "the tensor name \"__metadata__\" is reserved by the format",
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(Error::invalid(OP, format!("tensor {name:?} appears twice")));
        }
        if elements(shape) != Some(data.len()) {
            return Err(Error::shape(
                OP,
                format!(
                    "tensor {name:?}: shape {shape:?} does not match its {} {} elements",
                    data.len(),
                    data.dtype()
                ),
            ));
        }
        let view = TensorView::new(to_st(data.dtype()), shape.clone(), data.as_bytes())
            .map_err(|e| Error::invalid(OP, format!("tensor {name:?}: {e}")))?;
        views.push((name.as_str(), view));
    }
    let meta: HashMap<String, String> = metadata.clone().into_iter().collect();
    safetensors::serialize(views, Some(meta)).map_err(|e| Error::invalid(OP, e.to_string()))
}

/// Writes a checkpoint to `path` atomically; see [`to_bytes`] for what is checked.
#[cfg(not(target_arch = "wasm32"))]
pub fn save(
    path: impl AsRef<Path>,
    tensors: &[NamedTensor],
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let path = path.as_ref();
    let bytes = to_bytes(tensors, metadata).map_err(|e| Error::file(path, e.to_string()))?;
    write_atomic(path, &bytes)
}

/// Reads a checkpoint. Errors name the file, and the tensor where one is at fault:
/// missing file, truncated file, corrupt header, unknown or unsupported dtype, and a
/// shape that does not match the stored length.
#[cfg(not(target_arch = "wasm32"))]
pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::file(path, "checkpoint not found"),
        _ => Error::io(format!("{}: reading checkpoint", path.display()), e),
    })?;
    from_bytes(&bytes, path)
}

/// Parses checkpoint bytes; `path` is only used in error messages.
pub fn from_bytes(bytes: &[u8], path: impl AsRef<Path>) -> Result<Checkpoint> {
    let path = path.as_ref();
    let fail = |msg: String| Error::file(path, msg);

    // --- the header, checked here so that errors can be specific -------------------
    let Some(len_bytes) = bytes.first_chunk::<8>() else {
        return Err(fail(format!(
            "truncated: {} bytes, but a safetensors file starts with an 8-byte header length",
            bytes.len()
        )));
    };
    let header_len = u64::from_le_bytes(*len_bytes);
    let avail = (bytes.len() - 8) as u64;
    if header_len > avail {
        return Err(fail(format!(
            "truncated or not a safetensors file: the header length field says {header_len} \
             bytes but only {avail} follow it"
        )));
    }
    let header_end = 8 + header_len as usize;
    let header = std::str::from_utf8(&bytes[8..header_end])
        .map_err(|e| fail(format!("corrupt header: not UTF-8 ({e})")))?;
    let json: serde_json::Value = serde_json::from_str(header)
        .map_err(|e| fail(format!("corrupt header: not valid JSON ({e})")))?;
    let serde_json::Value::Object(entries) = json else {
        return Err(fail("corrupt header: the JSON is not an object".into()));
    };
    let data_len = bytes.len() - header_end;

    let mut layout: Vec<(usize, usize, &str)> = Vec::new();
    let mut metadata = BTreeMap::new();
    for (name, info) in &entries {
        if name == "__metadata__" {
            let serde_json::Value::Object(m) = info else {
                return Err(fail("corrupt header: __metadata__ is not an object".into()));
            };
            for (k, v) in m {
                let serde_json::Value::String(v) = v else {
                    return Err(fail(format!(
                        "corrupt header: metadata {k:?} is not a string"
                    )));
                };
                metadata.insert(k.clone(), v.clone());
            }
            continue;
        }
        let bad = |why: String| fail(format!("tensor {name:?}: {why}"));
        let dtype_name = info
            .get("dtype")
            .and_then(|d| d.as_str())
            .ok_or_else(|| bad("corrupt header: no dtype string".into()))?;
        let dtype = from_st_name(dtype_name).map_err(&bad)?;
        let shape: Vec<usize> = info
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
            .ok_or_else(|| bad("corrupt header: shape is not a list of sizes".into()))?;
        let offsets: Vec<usize> = info
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
            .filter(|o: &Vec<usize>| o.len() == 2)
            .ok_or_else(|| bad("corrupt header: data_offsets is not [begin, end]".into()))?;
        let (begin, end) = (offsets[0], offsets[1]);
        if begin > end {
            return Err(bad(format!(
                "corrupt header: data_offsets [{begin}, {end}] run backwards"
            )));
        }
        if end > data_len {
            return Err(bad(format!(
                "file truncated: the data ends at byte {end} of the data section, which has \
                 only {data_len} bytes"
            )));
        }
        let need = elements(&shape).and_then(|n| n.checked_mul(dtype.size_in_bytes()));
        if need != Some(end - begin) {
            return Err(bad(format!(
                "shape {shape:?} of {dtype} needs {} bytes but the file stores {}",
                need.map_or("more than usize::MAX".to_string(), |n| n.to_string()),
                end - begin
            )));
        }
        layout.push((begin, end, name));
    }
    // The tensors must tile the data section exactly: no overlap, no gap, no junk.
    layout.sort();
    let mut at = 0;
    for &(begin, end, name) in &layout {
        if begin != at {
            return Err(fail(format!(
                "corrupt header: tensor {name:?} starts at byte {begin} of the data, expected {at} \
                 (overlapping or missing data)"
            )));
        }
        at = end;
    }
    if at != data_len {
        return Err(fail(format!(
            "corrupt file: tensors cover {at} bytes but the data section has {data_len}"
        )));
    }

    // --- the tensors ------------------------------------------------------------------
    // The crate re-validates everything above; if it disagrees, say so generically.
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| fail(format!("invalid safetensors file: {e}")))?;
    let mut tensors = Vec::with_capacity(layout.len());
    for (_, _, name) in layout {
        let view = st
            .tensor(name)
            .map_err(|e| fail(format!("tensor {name:?}: {e}")))?;
        let dtype = from_st(view.dtype()).ok_or_else(|| {
            fail(format!(
                "tensor {name:?}: unsupported dtype {:?}",
                view.dtype()
            ))
        })?;
        let data = HostData::from_bytes(dtype, view.data())
            .map_err(|e| fail(format!("tensor {name:?}: {e}")))?;
        tensors.push((name.to_string(), data, view.shape().to_vec()));
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Checkpoint { tensors, metadata })
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn sample() -> (Vec<NamedTensor>, BTreeMap<String, String>) {
        let tensors = vec![
            (
                "wte".to_string(),
                HostData::F32((0..12).map(|i| i as f32 * 0.5 - 3.0).collect()),
                vec![3, 4],
            ),
            (
                "ln.w".to_string(),
                HostData::F16(vec![f16::from_f32(1.5), f16::NEG_INFINITY]),
                vec![2],
            ),
            (
                "ln.b".to_string(),
                HostData::BF16(vec![bf16::from_f32(-2.25); 6]),
                vec![1, 2, 3],
            ),
            (
                "ref".to_string(),
                HostData::F64(vec![std::f64::consts::PI, -0.0, 1e300]),
                vec![3],
            ),
            (
                "idx".to_string(),
                HostData::I32(vec![-1, i32::MAX, i32::MIN, 0]),
                vec![2, 2],
            ),
            ("step".to_string(), HostData::U32(vec![u32::MAX]), vec![]),
            ("empty".to_string(), HostData::F32(vec![]), vec![0, 5]),
        ];
        let mut meta = BTreeMap::new();
        meta.insert("step".to_string(), "1200".to_string());
        meta.insert("rng".to_string(), "seed=1 stream=0 word_pos=99".to_string());
        meta.insert("config".to_string(), "[model]\nn_layer = 4\n".to_string());
        (tensors, meta)
    }

    fn sorted(mut t: Vec<NamedTensor>) -> Vec<NamedTensor> {
        t.sort_by(|a, b| a.0.cmp(&b.0));
        t
    }

    #[test]
    fn round_trip_every_dtype_bit_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        let (tensors, meta) = sample();
        let dtypes: std::collections::HashSet<_> = tensors.iter().map(|t| t.1.dtype()).collect();
        assert_eq!(
            dtypes.len(),
            DType::ALL.len(),
            "the sample must cover every dtype"
        );

        save(&p, &tensors, &meta).unwrap();
        let ck = load(&p).unwrap();
        assert_eq!(ck.metadata, meta);
        // Bytes, not values: -0.0 and infinities must survive exactly.
        let want = sorted(tensors);
        assert_eq!(ck.tensors.len(), want.len());
        for (got, want) in ck.tensors.iter().zip(&want) {
            assert_eq!(got.0, want.0);
            assert_eq!(got.1.dtype(), want.1.dtype());
            assert_eq!(got.1.as_bytes(), want.1.as_bytes(), "{}", got.0);
            assert_eq!(got.2, want.2);
        }
        assert_eq!(ck.get("step").unwrap().2, Vec::<usize>::new());
        assert_eq!(ck.meta("step").unwrap(), "1200");
        assert!(ck.meta("nope").unwrap_err().to_string().contains("nope"));
        // The safetensors crate reads our files too.
        let bytes = std::fs::read(&p).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("ln.b").unwrap().dtype(), Dtype::BF16);
    }

    #[test]
    fn save_rejects_inconsistent_tensors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.safetensors");
        let meta = BTreeMap::new();
        let cases: Vec<(Vec<NamedTensor>, &str)> = vec![
            (
                vec![("w".into(), HostData::F32(vec![0.0; 5]), vec![2, 3])],
                "\"w\": shape [2, 3]",
            ),
            (
                vec![
                    ("w".into(), HostData::F32(vec![0.0]), vec![1]),
                    ("w".into(), HostData::F32(vec![0.0]), vec![1]),
                ],
                "\"w\" appears twice",
            ),
            (
                vec![("__metadata__".into(), HostData::F32(vec![0.0]), vec![1])],
                "reserved",
            ),
        ];
        for (tensors, needle) in cases {
            let e = save(&p, &tensors, &meta).unwrap_err().to_string();
            assert!(e.contains("x.safetensors") && e.contains(needle), "{e}");
            assert!(!p.exists());
        }
    }

    #[test]
    fn truncated_files_fail_with_the_file_named() {
        let (tensors, meta) = sample();
        let bytes = to_bytes(&tensors, &meta).unwrap();
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let cuts = [
            0,
            1,
            7,
            8,
            9,
            8 + header_len / 2,
            8 + header_len - 1,
            8 + header_len,
            8 + header_len + 1,
            bytes.len() / 2 + header_len / 2,
            bytes.len() - 1,
        ];
        for cut in cuts {
            let e = from_bytes(&bytes[..cut], "cut.safetensors")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("cut.safetensors: "), "cut {cut}: {e}");
            assert!(e.contains("truncated"), "cut {cut}: {e}");
        }
        // Cutting inside the data names the tensor whose bytes are missing.
        let e = from_bytes(&bytes[..bytes.len() - 1], "cut.safetensors")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tensor \""), "{e}");
        // And the real file on disk behaves the same.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("short.safetensors");
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(
            e.contains("short.safetensors") && e.contains("truncated"),
            "{e}"
        );
    }

    #[test]
    fn missing_file_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(dir.path().join("nothing.safetensors"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nothing.safetensors") && e.contains("not found"),
            "{e}"
        );

        for (garbage, needle) in [
            (
                b"hello world, this is not a checkpoint".to_vec(),
                "header length",
            ),
            (vec![0xff; 64], "header length"),
            (
                [&8u64.to_le_bytes()[..], b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8"].concat(),
                "not UTF-8",
            ),
            (
                [&8u64.to_le_bytes()[..], b"{ nope  "].concat(),
                "not valid JSON",
            ),
            ([&2u64.to_le_bytes()[..], b"[]"].concat(), "not an object"),
        ] {
            let e = from_bytes(&garbage, "junk.bin").unwrap_err().to_string();
            assert!(e.starts_with("junk.bin: ") && e.contains(needle), "{e}");
        }
    }

    /// A file with this header and `data_len` zero bytes of data.
    fn handmade(header: &str, data_len: usize) -> Vec<u8> {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.extend(std::iter::repeat_n(0u8, data_len));
        b
    }

    #[test]
    fn header_problems_name_the_tensor() {
        let cases = [
            (
                r#"{"w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}}"#,
                2,
                "tensor \"w\": unknown dtype \"Q4_K\"",
            ),
            (
                r#"{"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}"#,
                8,
                "tensor \"w\": dtype I64 is valid safetensors but brrr reads only",
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}"#,
                20,
                "tensor \"w\": shape [2, 3] of f32 needs 24 bytes but the file stores 20",
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
                4,
                "tensor \"w\": corrupt header: shape",
            ),
            (
                r#"{"w":{"shape":[1],"data_offsets":[0,4]}}"#,
                4,
                "tensor \"w\": corrupt header: no dtype",
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}"#,
                4,
                "tensor \"w\": corrupt header: data_offsets [4, 0]",
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}}"#,
                4,
                "tensor \"w\": corrupt header: data_offsets",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}"#,
                6,
                "tensor \"b\" starts at byte 2",
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
                8,
                "tensors cover 4 bytes but the data section has 8",
            ),
            (
                r#"{"__metadata__":{"step":3},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
                4,
                "metadata \"step\" is not a string",
            ),
            (
                r#"{"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}}"#,
                4,
                "more than usize::MAX",
            ),
        ];
        for (header, data_len, needle) in cases {
            let e = from_bytes(&handmade(header, data_len), "h.safetensors")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("h.safetensors: ") && e.contains(needle),
                "{needle}\n  got: {e}"
            );
        }
        // A well-formed handmade file loads.
        let ok = handmade(
            r#"{"__metadata__":{"k":"v"},"w":{"dtype":"U32","shape":[2],"data_offsets":[0,8]}}"#,
            8,
        );
        let ck = from_bytes(&ok, "h").unwrap();
        assert_eq!(ck.metadata["k"], "v");
        assert_eq!(ck.tensors[0].1, HostData::U32(vec![0, 0]));
    }

    #[test]
    fn every_single_byte_flip_in_the_header_errors_or_loads_cleanly() {
        // Corruption must never panic, whatever byte it hits.
        let (tensors, meta) = sample();
        let bytes = to_bytes(&tensors, &meta).unwrap();
        let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        for i in 0..header_end {
            let mut b = bytes.clone();
            b[i] ^= 0x5a;
            let _ = from_bytes(&b, "flip");
        }
    }
}
