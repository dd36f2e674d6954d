//! Reading a bundle: the checksum, the structure, then every block as a
//! stream, with memory bounded by what the records prove to be there
//! (objects-format.md, "Bundles", "Reading with bounded memory").

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::hash::{ObjectId, ID_LEN};
use crate::object::{EncodedObject, ObjectKind};
use crate::odb::journal::{check_frame_size, streamed_id, MAX_OBJECT_SIZE};
use crate::refs::op::record_from_bytes;
use crate::refs::RefName;

use super::{
    Bundle, BLOCK_TARGET, BUNDLE_FORMAT_INITIAL, BUNDLE_FORMAT_VERSION, BUNDLE_MAGIC, CHECKSUM_LEN,
    CODEC_RAW, CODEC_ZSTD, RECORD_HEADER,
};

impl Bundle {
    /// Decodes a bundle's bytes: the checksum first, then the structure,
    /// then every object's hash. `path` names the source in errors.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Bundle> {
        let corrupt = |offset: usize, reason: String| Error::CorruptFile {
            path: path.to_path_buf(),
            offset: offset as u64,
            reason,
        };
        if bytes.len() < 8 || &bytes[..4] != BUNDLE_MAGIC {
            return Err(corrupt(0, "not a sessctl bundle (no SBDL magic)".into()));
        }
        let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        if !(BUNDLE_FORMAT_INITIAL..=BUNDLE_FORMAT_VERSION).contains(&version) {
            return Err(corrupt(
                4,
                format!(
                    "bundle format {version}; this sessctl reads formats \
                     {BUNDLE_FORMAT_INITIAL} to {BUNDLE_FORMAT_VERSION}"
                ),
            ));
        }
        if bytes.len() < 8 + CHECKSUM_LEN {
            return Err(corrupt(bytes.len(), "truncated: no checksum".into()));
        }
        let body_end = bytes.len() - CHECKSUM_LEN;
        let sum = blake3::hash(&bytes[..body_end]);
        if sum.as_bytes()[..] != bytes[body_end..] {
            return Err(corrupt(
                body_end,
                "checksum mismatch: the bundle is damaged or truncated".into(),
            ));
        }
        let mut r = Reader {
            buf: &bytes[..body_end],
            pos: 8,
            path,
        };
        let mut refs = Vec::new();
        for _ in 0..r.u32()? {
            let at = r.pos;
            let n = r.u16()? as usize;
            let name = r.text(n)?;
            let name = RefName::parse(name).map_err(|e| corrupt(at, e.to_string()))?;
            if name == RefName::Head {
                return Err(corrupt(at, "a bundle cannot carry HEAD".into()));
            }
            refs.push((name, r.id()?));
        }
        let mut conversations = Vec::new();
        for _ in 0..r.u32()? {
            let at = r.pos;
            let n = r.u16()? as usize;
            let name = r.text(n)?.to_owned();
            crate::refs::validate_name(&name).map_err(|e| corrupt(at, e.to_string()))?;
            let len = r.u32()? as usize;
            let record = record_from_bytes(r.take(len)?)
                .map_err(|e| corrupt(at, format!("conversation record {name}: {e}")))?;
            conversations.push((name, record));
        }
        let mut prerequisites = Vec::new();
        for _ in 0..r.u32()? {
            prerequisites.push(r.id()?);
        }
        let count_at = r.pos;
        let count = r.u64()?;
        let blocks = r.u32()?;
        let mut objects = Vec::new();
        for _ in 0..blocks {
            let at = r.pos;
            let codec = r.take(1)?[0];
            let stored = r.u32()? as usize;
            let raw_len = r.u32()? as usize;
            let data = r.take(stored)?;
            let block = Block { at, raw_len, path };
            block.decode(codec, data, &mut objects)?;
            if objects.len() as u64 > count {
                return Err(corrupt(
                    count_at,
                    format!("the header counts {count} objects; the blocks hold more"),
                ));
            }
        }
        if r.pos != r.buf.len() {
            return Err(corrupt(r.pos, "bytes after the last block".into()));
        }
        if objects.len() as u64 != count {
            return Err(corrupt(
                count_at,
                format!(
                    "the header counts {count} objects, the blocks hold {}",
                    objects.len()
                ),
            ));
        }
        Ok(Bundle {
            refs,
            conversations,
            prerequisites,
            objects,
        })
    }
}

/// One block of a bundle as its header describes it, decoded as a stream:
/// memory grows with what the records inside prove to be there, never with
/// what a header claims (objects-format.md, "Bundles", "Reading").
struct Block<'p> {
    /// Where the block's header starts in the file.
    at: usize,
    /// The inflated size its header declares.
    raw_len: usize,
    path: &'p Path,
}

/// The most a block may hold inflated: a full block of small records and
/// then the largest object there may be.
const MAX_BLOCK_RAW: usize = BLOCK_TARGET + RECORD_HEADER + MAX_OBJECT_SIZE;

impl Block<'_> {
    fn corrupt(&self, reason: String) -> Error {
        Error::CorruptFile {
            path: self.path.to_path_buf(),
            offset: self.at as u64,
            reason,
        }
    }

    /// Checks every record of the block, then keeps its objects. A zstd
    /// block is inflated twice: the first pass hashes each payload as it
    /// streams by and keeps nothing, so a record that lies about its kind,
    /// length or content is refused before any of it is held; the second
    /// keeps only what the first proved.
    fn decode(&self, codec: u8, data: &[u8], objects: &mut Vec<EncodedObject>) -> Result<()> {
        if self.raw_len > MAX_BLOCK_RAW {
            return Err(self.corrupt(format!(
                "the block declares {} bytes inflated, more than a block may hold ({MAX_BLOCK_RAW})",
                self.raw_len
            )));
        }
        match codec {
            CODEC_RAW if data.len() != self.raw_len => Err(self.corrupt(format!(
                "a raw block stores {} bytes but declares {} inflated: the two must be equal",
                data.len(),
                self.raw_len
            ))),
            CODEC_RAW => self.records(&mut &data[..], Some(objects)),
            CODEC_ZSTD => {
                check_frame_size(data, self.raw_len)
                    .map_err(|e| self.corrupt(format!("the block's {e}")))?;
                self.records(&mut self.inflate(data)?, None)?;
                self.records(&mut self.inflate(data)?, Some(objects))
            }
            _ => Err(self.corrupt(format!("unknown block codec {codec}"))),
        }
    }

    fn inflate<'d>(&self, data: &'d [u8]) -> Result<impl Read + 'd> {
        let decoder = zstd::stream::read::Decoder::with_buffer(data)
            .map_err(|e| self.corrupt(format!("zstd: {e}")))?;
        Ok(decoder.single_frame())
    }

    /// Reads the records of an inflated block: each is checked (kind,
    /// length, hash) as it streams by; with `keep`, the objects are kept.
    fn records(
        &self,
        src: &mut impl Read,
        mut keep: Option<&mut Vec<EncodedObject>>,
    ) -> Result<()> {
        let mut pos = 0;
        while pos < self.raw_len {
            let mut head = [0u8; RECORD_HEADER];
            if self.raw_len - pos < RECORD_HEADER {
                return Err(self.corrupt(format!(
                    "byte {pos} of the block: it ends inside an object record's header"
                )));
            }
            self.fill(src, &mut head, pos)?;
            let kind = ObjectKind::from_code(head[0]).ok_or_else(|| {
                self.corrupt(format!(
                    "byte {pos} of the block: unknown object kind {}",
                    head[0]
                ))
            })?;
            let id = ObjectId::from_slice(&head[1..1 + ID_LEN]).expect("32 bytes");
            let len = u32::from_le_bytes(head[1 + ID_LEN..].try_into().expect("4 bytes")) as usize;
            pos += RECORD_HEADER;
            if len > MAX_OBJECT_SIZE {
                return Err(self.corrupt(format!(
                    "byte {pos} of the block: object {id} declares {len} bytes, more than an object may hold ({MAX_OBJECT_SIZE})"
                )));
            }
            if len > self.raw_len - pos {
                return Err(self.corrupt(format!(
                    "byte {pos} of the block: object {id} declares {len} bytes, past the end of its block"
                )));
            }
            if let Some(objects) = keep.as_deref_mut() {
                // Kept only once the length is proven: a raw block holds
                // it, a zstd block's first pass read it.
                let mut payload = vec![0u8; len];
                self.fill(src, &mut payload, pos)?;
                objects.push(
                    EncodedObject::verified(id, kind, payload)
                        .map_err(|reason| Error::Corrupt { id, reason })?,
                );
            } else {
                let actual = streamed_id(src, kind, len).map_err(|e| {
                    self.corrupt(format!("byte {pos} of the block: object {id} {e}"))
                })?;
                if actual != id {
                    return Err(Error::Corrupt {
                        id,
                        reason: format!(
                            "content hashes to {actual} ({kind}, {len} bytes), not to its id"
                        ),
                    });
                }
            }
            pos += len;
        }
        let mut extra = [0u8; 1];
        match src.read(&mut extra) {
            Ok(0) => Ok(()),
            Ok(_) => Err(self.corrupt(format!(
                "the block inflates past the {} bytes it declares",
                self.raw_len
            ))),
            Err(e) => Err(self.corrupt(format!("byte {pos} of the block: {e}"))),
        }
    }

    /// Fills `out` from the inflated block at `pos`, or names how it fell short.
    fn fill(&self, src: &mut impl Read, out: &mut [u8], pos: usize) -> Result<()> {
        src.read_exact(out).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.corrupt(format!(
                    "byte {pos} of the block: it inflates to fewer than the {} bytes it declares",
                    self.raw_len
                ))
            } else {
                self.corrupt(format!("byte {pos} of the block: {e}"))
            }
        })
    }
}

/// A bounds-checked cursor over a bundle's bytes. It is only used after the
/// checksum matched, so running short means a writer bug or a forgery;
/// still, it never reads out of bounds.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() - self.pos < n {
            return Err(self.corrupt(format!(
                "the structure runs past its end: a field of {n} bytes starts {} bytes before it",
                self.buf.len() - self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn corrupt(&self, reason: String) -> Error {
        Error::CorruptFile {
            path: self.path.to_path_buf(),
            offset: self.pos as u64,
            reason,
        }
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn id(&mut self) -> Result<ObjectId> {
        Ok(ObjectId::from_slice(self.take(ID_LEN)?).expect("32 bytes"))
    }
    fn text(&mut self, n: usize) -> Result<&'a str> {
        let at = self.pos;
        std::str::from_utf8(self.take(n)?).map_err(|_| {
            self.pos = at;
            self.corrupt("a name is not UTF-8".into())
        })
    }
}
