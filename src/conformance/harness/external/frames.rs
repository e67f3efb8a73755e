//! The frames of the `--external` protocol and what a reply may hold: the frame reader (an
//! 8-byte little-endian length, then the body), the reply decoder (a safetensors buffer whose
//! metadata echoes the request's `id`), and the check of a compress reply's outputs against the
//! geometry before anything indexes by them. Pure functions of bytes, so the fuzz target
//! `fuzz/fuzz_targets/external_frames.rs` drives them directly.

use crate::conformance::dump::{read_safetensors, RawTensor, Run};
use crate::kernel::spec::KernelSpec;
use ndarray::{Array3, Array4};
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

/// Largest reply frame accepted (a guard against a process writing garbage to stdout).
pub const MAX_FRAME: u64 = 1 << 30;

/// Why a request got no usable reply.
#[derive(Debug, PartialEq)]
pub enum Fault {
    /// The kernel answered with metadata `error`: this input failed (a FAIL row, the run goes on).
    Kernel(String),
    /// The process broke the protocol, died or went silent: the run ends (exit status 2).
    Protocol(String),
}

/// Reads one frame (8-byte little-endian length, then the body) from `r`: `Ok(None)` at a clean
/// end before a frame, an error for a frame over [`MAX_FRAME`] or cut short.
pub fn read_frame<R: Read>(r: &mut R) -> std::result::Result<Option<Vec<u8>>, String> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(format!("frame cut after {got} of the 8 length bytes")),
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read its stdout ({e})")),
        }
    }
    let n = u64::from_le_bytes(head);
    if n > MAX_FRAME {
        return Err(format!(
            "sent a frame of {n} bytes (more than {MAX_FRAME}): does the process print to stdout? \
             The protocol owns stdout; log to stderr"
        ));
    }
    let mut buf = Vec::new();
    r.by_ref().take(n).read_to_end(&mut buf).map_err(|e| format!("cannot read its stdout ({e})"))?;
    if (buf.len() as u64) < n {
        return Err(format!("sent a frame of {n} bytes cut after {}", buf.len()));
    }
    Ok(Some(buf))
}

/// `body` as a frame: its length (8 bytes, little-endian), then the body.
pub fn frame(body: &[u8]) -> Vec<u8> {
    [&(body.len() as u64).to_le_bytes()[..], body].concat()
}

/// A decoded reply: its metadata and its tensors.
pub type Reply = (HashMap<String, String>, BTreeMap<String, RawTensor>);

/// Decodes the reply `buf` to request `id`: a safetensors buffer whose metadata carries the
/// request's `id`; metadata `error` is the kernel's failure on that input.
pub fn decode_reply(buf: &[u8], id: u64) -> std::result::Result<Reply, Fault> {
    let (meta, tensors) = read_safetensors(Path::new("reply"), buf)
        .map_err(|e| Fault::Protocol(format!("sent a reply that is not a safetensors buffer ({e})")))?;
    match meta.get("id") {
        None => return Err(Fault::Protocol("sent a reply without `id` (each reply echoes its request's id)".into())),
        Some(got) if got.parse::<u64>().ok() != Some(id) => {
            return Err(Fault::Protocol(format!(
                "sent a reply with id {:?}, expected {id} (a late reply to an earlier request?)",
                got.chars().take(40).collect::<String>()
            )))
        }
        Some(_) => {}
    }
    if let Some(e) = meta.get("error") {
        return Err(Fault::Kernel(format!("the kernel failed: {}", one_line(e, 500))));
    }
    Ok((meta, tensors))
}

/// The outputs of a compress reply to input `x: [B, T, d]` at head width `d_head`, each shape
/// checked against `spec`'s geometry before use: `keys` `[B, n, d_h]` with `n` the geometry's
/// window count for `T`; values and pooled tensors the same; gates `[B, n, W, c]` with
/// `c = d_h` or 1; no other output. An error says which output is wrong and how.
pub fn reply_outputs(
    spec: &KernelSpec,
    d_head: usize,
    x: &Array3<f64>,
    mut out: BTreeMap<String, RawTensor>,
) -> std::result::Result<Run, String> {
    let (b, t, dh, w) = (x.shape()[0], x.shape()[1], d_head, spec.geometry.window());
    let mut take = |name: &str, rank: usize| -> std::result::Result<Option<RawTensor>, String> {
        match out.remove(name) {
            None => Ok(None),
            Some(r) if r.shape.len() == rank && r.shape[0] == b => Ok(Some(r)),
            Some(r) => Err(format!("output {name} has shape {:?}; expected {rank} axes, batch {b}", r.shape)),
        }
    };
    let keys = take("keys", 3)?.ok_or("the reply has no keys")?;
    // The count is checked against the geometry before any check indexes by it (K1 then
    // reports a wrong count as a failure of the kernel).
    let n = keys.shape[1];
    let expected = spec.geometry.num_windows(t);
    if n != expected {
        return Err(format!(
            "the reply has {n} windows (keys {:?}) for T = {t} tokens; the geometry gives {expected}",
            keys.shape
        ));
    }
    let arr3 = |name: &str, t: RawTensor| -> std::result::Result<Array3<f64>, String> {
        if t.shape != [b, n, dh] {
            return Err(format!("output {name} has shape {:?}; expected [{b}, {n}, {dh}]", t.shape));
        }
        Array3::from_shape_vec((b, n, dh), t.data).map_err(|e| format!("output {name}: {e}"))
    };
    let arr4 = |name: &str, t: RawTensor| -> std::result::Result<Array4<f64>, String> {
        let c = t.shape.get(3).copied().unwrap_or(0);
        if t.shape[..3] != [b, n, w] || !(c == 1 || c == dh) {
            return Err(format!(
                "output {name} has shape {:?}; expected [{b}, {n}, {w}, c] with c = {dh} or 1",
                t.shape
            ));
        }
        Array4::from_shape_vec((b, n, w, c), t.data).map_err(|e| format!("output {name}: {e}"))
    };
    let values = take("values", 3)?.map(|t| arr3("values", t)).transpose()?;
    let pooled_keys = take("pooled_keys", 3)?.map(|t| arr3("pooled_keys", t)).transpose()?;
    let pooled_values = take("pooled_values", 3)?.map(|t| arr3("pooled_values", t)).transpose()?;
    let gate_k = take("gate_k", 4)?.map(|t| arr4("gate_k", t)).transpose()?;
    let gate_v = take("gate_v", 4)?.map(|t| arr4("gate_v", t)).transpose()?;
    if let Some(name) = out.keys().next() {
        return Err(format!("unknown output {}", one_line(name, 60)));
    }
    Ok(Run { input: x.clone(), keys: arr3("keys", keys)?, values, pooled_keys, pooled_values, gate_k, gate_v })
}

/// `s` on one line, at most `max` characters.
pub(super) fn one_line(s: &str, max: usize) -> String {
    let t: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(max).collect();
    if s.chars().count() > max {
        format!("{t}...")
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::dump::safetensors_bytes;
    use candle_core::DType;

    fn reply(meta: &[(&str, &str)]) -> Vec<u8> {
        let meta = meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        safetensors_bytes(&meta, &BTreeMap::new()).unwrap()
    }

    #[test]
    fn frames_are_read_whole_and_bad_lengths_refused_without_allocating_them() {
        let body = reply(&[("id", "1")]);
        let mut two = frame(&body);
        two.extend(frame(&body));
        let mut r = std::io::Cursor::new(two);
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), body);
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), body);
        assert_eq!(read_frame(&mut r).unwrap(), None, "a clean end");
        // 2^40 bytes announced: refused before reading (no allocation of the announced size).
        let e = read_frame(&mut std::io::Cursor::new((1u64 << 40).to_le_bytes())).unwrap_err();
        assert!(e.contains("print to stdout"), "{e}");
        // A frame one byte short of MAX_FRAME announced, 3 bytes sent: cut, not a huge buffer.
        let mut cut = (MAX_FRAME - 1).to_le_bytes().to_vec();
        cut.extend([1, 2, 3]);
        assert!(read_frame(&mut std::io::Cursor::new(cut)).unwrap_err().contains("cut after 3"));
        assert!(read_frame(&mut std::io::Cursor::new([1u8, 2, 3])).unwrap_err().contains("3 of the 8 length bytes"));
    }

    #[test]
    fn a_reply_pairs_only_with_its_request() {
        assert!(decode_reply(&reply(&[("id", "7")]), 7).is_ok());
        for (meta, needle) in [
            (&[("id", "6")][..], "id \"6\", expected 7"),
            (&[("op", "compressed")][..], "without `id`"),
            (&[("id", "seven")][..], "expected 7"),
        ] {
            match decode_reply(&reply(meta), 7) {
                Err(Fault::Protocol(m)) => assert!(m.contains(needle), "{m}"),
                other => panic!("{meta:?}: {other:?}"),
            }
        }
        // The kernel's own error on an input is a kernel fault (a FAIL row), once the id matches.
        match decode_reply(&reply(&[("id", "7"), ("error", "ValueError: bad\nshape")]), 7) {
            Err(Fault::Kernel(m)) => assert_eq!(m, "the kernel failed: ValueError: bad shape"),
            other => panic!("{other:?}"),
        }
        match decode_reply(b"not safetensors", 1) {
            Err(Fault::Protocol(m)) => assert!(m.contains("not a safetensors buffer"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    fn tensor(shape: &[usize]) -> RawTensor {
        RawTensor { dtype: DType::F64, shape: shape.to_vec(), data: vec![0.5; shape.iter().product()] }
    }

    #[test]
    fn reply_outputs_are_held_to_the_geometry() {
        // w4s2: T = 8 gives 3 windows.
        let spec = KernelSpec::preset("w4s2").unwrap();
        let x = Array3::<f64>::zeros((2, 8, 3));
        let good = |extra: &[(&str, RawTensor)]| {
            let mut out = BTreeMap::from([("keys".to_string(), tensor(&[2, 3, 5]))]);
            out.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
            out
        };
        let run = reply_outputs(&spec, 5, &x, good(&[("gate_k", tensor(&[2, 3, 4, 1]))])).unwrap();
        assert_eq!(run.keys.dim(), (2, 3, 5));
        assert_eq!(run.gate_k.unwrap().dim(), (2, 3, 4, 1));
        for (out, needle) in [
            (BTreeMap::new(), "no keys"),
            (BTreeMap::from([("keys".to_string(), tensor(&[2, 6, 5]))]), "6 windows"),
            (BTreeMap::from([("keys".to_string(), tensor(&[1, 3, 5]))]), "batch 2"),
            (BTreeMap::from([("keys".to_string(), tensor(&[2, 3, 4]))]), "expected [2, 3, 5]"),
            (good(&[("values", tensor(&[2, 4, 5]))]), "output values"),
            (good(&[("gate_k", tensor(&[2, 3, 5, 1]))]), "expected [2, 3, 4, c]"),
            (good(&[("gate_v", tensor(&[2, 3, 4, 2]))]), "c = 5 or 1"),
            (good(&[("gate_k", tensor(&[2, 3, 4]))]), "expected 4 axes"),
            (good(&[("extra", tensor(&[1]))]), "unknown output extra"),
        ] {
            let e = reply_outputs(&spec, 5, &x, out).unwrap_err();
            assert!(e.contains(needle), "{needle}: {e}");
        }
        // A shape whose product disagrees with the data is an error, not a panic.
        let mut short = tensor(&[2, 3, 5]);
        short.data.pop();
        let e = reply_outputs(&spec, 5, &x, BTreeMap::from([("keys".to_string(), short)])).unwrap_err();
        assert!(e.contains("output keys"), "{e}");
    }
}
