//! zstd dictionaries of version-2 packs (objects-format.md, "Packs"): the
//! training of a pack's dictionary on its own records, block compression
//! with a prepared dictionary, and inflating with one.
//!
//! A block names the dictionary it was compressed with in the index's block
//! table; the dictionary's bytes sit in the pack and its blake3 in the
//! index, checked before it is first used. Small records gain the most: a
//! message alone compresses 2.96x with a dictionary against 2.06x without.

use std::io::Read;

use zstd::dict::DecoderDictionary;
use zstd::zstd_safe::{self, CCtx, CDict, CParameter};

use crate::odb::journal::{check_frame_size, decompress_into, MAX_OBJECT_SIZE};

/// Fewer sample bytes than this train no dictionary: too little to learn
/// from, and a pack that small gains nothing worth its bytes.
pub(super) const MIN_TRAINING_BYTES: usize = 64 << 10;
/// Samples a dictionary is trained on, at most, per byte of dictionary:
/// training time grows with them, the gain flattens well before.
const SAMPLE_BYTES_PER_DICTIONARY_BYTE: usize = 64;
/// A sample is a record's first bytes at most: what a dictionary learns is
/// the structure records share, which sits at their start.
const MAX_SAMPLE: usize = 16 << 10;

/// Trains a dictionary of at most `max_size` bytes on `records` (each a
/// pack record: kind byte and payload), taking samples evenly from the
/// whole run. `None` when there is too little to train on or zstd finds
/// nothing to learn: the pack is then written without one.
pub(super) fn train(records: &[&[u8]], max_size: usize) -> Option<Vec<u8>> {
    if max_size == 0 || records.len() < 16 {
        return None;
    }
    let total: usize = records.iter().map(|r| r.len().min(MAX_SAMPLE)).sum();
    if total < MIN_TRAINING_BYTES.max(max_size * 4) {
        return None;
    }
    let budget = max_size.saturating_mul(SAMPLE_BYTES_PER_DICTIONARY_BYTE);
    // Every k-th record, so that the samples span the pack.
    let step = total.div_ceil(budget).max(1);
    let samples: Vec<&[u8]> = records
        .iter()
        .step_by(step)
        .map(|r| &r[..r.len().min(MAX_SAMPLE)])
        .collect();
    if samples.len() < 16 {
        return None;
    }
    let dict = zstd::dict::from_samples(&samples, max_size).ok()?;
    (dict.len() >= 256).then_some(dict)
}

/// A block compressor with a prepared dictionary, or none.
pub(super) struct BlockCompressor {
    // Declared before `dict`: the context refers to the dictionary, and is
    // dropped first.
    cctx: CCtx<'static>,
    dict: Option<CDict<'static>>,
}

impl BlockCompressor {
    pub(super) fn new(level: i32, dictionary: Option<&[u8]>) -> Result<Self, String> {
        let mut cctx = CCtx::try_create().ok_or("zstd: cannot create a compression context")?;
        let code = |c: usize| zstd_safe::get_error_name(c).to_owned();
        cctx.set_parameter(CParameter::CompressionLevel(level))
            .map_err(code)?;
        cctx.set_parameter(CParameter::ChecksumFlag(true))
            .map_err(code)?;
        let dict = match dictionary {
            Some(d) => {
                Some(CDict::try_create(d, level).ok_or("zstd: cannot prepare a dictionary")?)
            }
            None => None,
        };
        if let Some(d) = &dict {
            cctx.ref_cdict(d).map_err(code)?;
        }
        Ok(BlockCompressor { cctx, dict })
    }

    /// Whether blocks are compressed with a dictionary.
    pub(super) fn has_dictionary(&self) -> bool {
        self.dict.is_some()
    }

    /// One zstd frame of `src`, declaring its size, with zstd's checksum.
    pub(super) fn compress(&mut self, src: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        out.reserve(zstd_safe::compress_bound(src.len()));
        self.cctx
            .compress2(out, src)
            .map(|_| ())
            .map_err(|c| format!("zstd: {}", zstd_safe::get_error_name(c)))
    }
}

/// Decompresses block frame `data` of `raw_len` bytes into `out` (its
/// contents replaced) with `dict`, or none: the checks of
/// [`decompress_into`], and a context per thread.
pub(super) fn inflate_into(
    data: &[u8],
    raw_len: usize,
    dict: Option<&DecoderDictionary<'static>>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let Some(dict) = dict else {
        return decompress_into(data, raw_len, out);
    };
    check_frame_size(data, raw_len)?;
    if raw_len > MAX_OBJECT_SIZE {
        return Err(format!(
            "{raw_len} bytes is more than the {MAX_OBJECT_SIZE}-byte limit of an object"
        ));
    }
    thread_local! {
        static DCTX: std::cell::RefCell<Option<zstd_safe::DCtx<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    out.clear();
    out.reserve_exact(raw_len);
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(
                zstd_safe::DCtx::try_create()
                    .ok_or("zstd: cannot create a decompression context")?,
            );
        }
        let d = slot.as_mut().expect("set just above");
        d.decompress_using_ddict(out, data, dict.as_ddict())
            .map(|_| ())
            .map_err(|c| format!("zstd: {}", zstd_safe::get_error_name(c)))
    })?;
    if out.len() != raw_len {
        return Err(format!(
            "decompressed to {} bytes, not the recorded {raw_len}",
            out.len()
        ));
    }
    Ok(())
}

/// Block frame `data`, which must declare `raw_len` bytes, inflated as a
/// stream with `dict`, or none.
pub(super) fn inflating<'a>(
    data: &'a [u8],
    raw_len: usize,
    dict: Option<&'a DecoderDictionary<'static>>,
) -> Result<Box<dyn Read + 'a>, String> {
    match dict {
        None => Ok(Box::new(crate::odb::journal::inflating(data, raw_len)?)),
        Some(dict) => {
            check_frame_size(data, raw_len)?;
            let d = zstd::stream::read::Decoder::with_prepared_dictionary(
                std::io::BufReader::new(data),
                dict,
            )
            .map_err(|e| format!("zstd: {e}"))?;
            Ok(Box::new(d.single_frame()))
        }
    }
}
