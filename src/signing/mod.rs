//! Signed artifacts: precompiled code trusted for who signed it (Ed25519), not for who uploaded it.
//!
//! An artifact is a zip of `exec.wasm` (the module or component), `exec.cwasm.lz4` (its code,
//! precompiled for one engine) and `exec.sig`. The signature covers the packed code's
//! BLAKE3, the module's SHA-256 and the engine's compatibility hash: a runtime that trusts
//! the key and runs that engine checks it before it inflates anything, then loads the code
//! (and never unpacks the module); any other runtime compiles `exec.wasm`, as for a zip.
//!
//! The code is cut in slices of 1 MiB, each an LZ4 frame, so that a runtime inflates it on
//! every core it has. `lz4 -d` unpacks it all the same. Artifacts of the formats before are
//! still read: v3 packed the slices as zstd frames (`exec.cwasm.zst`), smaller but much
//! slower to inflate; v2 signed the inflated code, the BLAKE3 of its slices'
//! BLAKE3s: a runtime inflates and hashes those first, letting each slice go, and inflates
//! them again once they check.

use std::io::{Read, Seek};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

mod frames;
mod keys;

use frames::{Packing, code_digest_of, frames, seal, unpack_verified};
pub use frames::{lz4_frame, pack};
pub use keys::{SignArgs, keygen, read_signing_key, read_trusted, read_verify_key};
use sha2::{Digest, Sha256};

/// The artifact's entries, beside the module.
pub const CODE_ENTRY: &str = "exec.cwasm.lz4";
/// Where artifacts before v4 keep their code.
pub const CODE_ENTRY_V3: &str = "exec.cwasm.zst";
pub const SIGNATURE_ENTRY: &str = "exec.sig";
/// The entries that are for the runtime, not the guest.
pub const RUNTIME_ENTRIES: [&str; 3] = [CODE_ENTRY, CODE_ENTRY_V3, SIGNATURE_ENTRY];
/// What a signature is over comes after this, so that it means nothing anywhere else.
/// Versions 3 and 4 sign the packed code, so that it is checked before a byte is inflated;
/// version 2 signed the inflated code. Artifacts of every version are read.
const CONTEXT: &[u8] = b"wasmloop signed artifact v4\0";
const CONTEXT_V3: &[u8] = b"wasmloop signed artifact v3\0";
const CONTEXT_V2: &[u8] = b"wasmloop signed artifact v2\0";
/// The format `exec.sig` says it is, as written now.
const FORMAT: u32 = 4;
/// The code is compressed and hashed in slices of this many bytes.
const SLICE: usize = 1 << 20;
/// LZ4 HC's level for the code: it packs somewhat larger than zstd's level 9 (v3) but
/// inflates much faster, and of a cold `/init` the inflating weighs more than the upload's
/// extra bytes.
const LEVEL: i32 = 9;

/// A v2 signature's code digest, from all its slices' BLAKE3s in order (BLAKE3 because
/// it hashes much faster than SHA-256 here).
fn digest_of_slices(digests: &[u8]) -> [u8; 32] {
    *blake3::hash(digests).as_bytes()
}

/// The text of `exec.sig`: which key signed, for which engine and module, and the signature
/// of the code as packed.
pub fn sign(key: &SigningKey, module: &[u8], packed: &[u8], engine: &str) -> String {
    let module = Sha256::digest(module);
    let packed = blake3::hash(packed);
    let signature = key.sign(&message(CONTEXT, &module, packed.as_bytes(), engine));
    format!(
        "{{\"format\":{FORMAT},\"key\":\"{}\",\"engine\":\"{engine}\",\"module\":\"{}\",\
         \"signature\":\"{}\"}}\n",
        crate::hex(key.verifying_key().as_bytes()),
        crate::hex(&module),
        crate::hex(&signature.to_bytes())
    )
}

/// Why a signed artifact's code is not loaded, by kind (the runtime then compiles the
/// module instead, and its logs say why).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Made for another engine: another wasmtime version or compiler, as while runtimes
    /// are upgraded one by one.
    #[error(
        "the code was compiled for another engine ({artifact}, this one is {runtime}): another \
         wasmtime version or compiler"
    )]
    OtherEngine { artifact: String, runtime: String },
    /// Signed by a key not among the runtime's (`--trust-key`); the key, in hex.
    #[error("signed by a key this runtime does not trust ({0})")]
    UntrustedKey(String),
    /// The signature does not match what it claims to sign.
    #[error("the signature does not match the code (altered, or signed for other code)")]
    Altered,
    /// Not what `wasmloop compile --sign-key` makes, or past a size bound; the text says how.
    #[error("{0}")]
    Malformed(String),
    /// This host could not hold the code (a memory file, its seals).
    #[error("{0}")]
    Host(String),
}

/// What a runtime trusts: the verify keys, and the engine its code must have been made for.
pub struct Trust {
    pub keys: Vec<VerifyingKey>,
    pub engine: String,
}

/// `exec.sig`, read.
#[derive(serde::Deserialize)]
struct SignatureFile {
    /// 4 and 3 sign the packed code (LZ4, zstd); absent, the inflated code (v2).
    #[serde(default)]
    format: Option<u32>,
    key: String,
    engine: String,
    /// The module's SHA-256: the module itself is not needed to check the code.
    module: String,
    signature: String,
}

impl SignatureFile {
    fn parse(bytes: &[u8]) -> Result<Self, Refusal> {
        serde_json::from_slice(bytes).map_err(|e| {
            Refusal::Malformed(format!(
                "{SIGNATURE_ENTRY} is not a signature file of this runtime's: {e}"
            ))
        })
    }

    /// What can be told before reading the code: the engine, and whose key it is.
    fn key<'a>(&self, trust: &'a Trust) -> Result<&'a VerifyingKey, Refusal> {
        if self.engine != trust.engine {
            return Err(Refusal::OtherEngine {
                artifact: self.engine.clone(),
                runtime: trust.engine.clone(),
            });
        }
        trust
            .keys
            .iter()
            .find(|k| crate::hex(k.as_bytes()) == self.key)
            .ok_or_else(|| Refusal::UntrustedKey(self.key.clone()))
    }

    /// Which of the formats this runtime reads it is.
    fn format(&self) -> Result<Format, Refusal> {
        match self.format {
            Some(4) => Ok(Format::V4),
            Some(3) => Ok(Format::V3),
            None => Ok(Format::V2),
            Some(other) => Err(Refusal::Malformed(format!(
                "{SIGNATURE_ENTRY} is of format {other}, which this runtime does not read (it \
                 reads 2 to {FORMAT}): make the artifact with this runtime's `wasmloop compile`"
            ))),
        }
    }

    fn check(
        &self,
        format: Format,
        key: &VerifyingKey,
        code_digest: &[u8],
        engine: &str,
    ) -> Result<(), Refusal> {
        let malformed = |what: &str| Refusal::Malformed(what.to_owned());
        let module = unhex(&self.module)
            .filter(|m| m.len() == 32)
            .ok_or_else(|| malformed("the module digest is not 32 bytes of hex"))?;
        let signature = unhex(&self.signature)
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
            .map(|b| Signature::from_bytes(&b))
            .ok_or_else(|| malformed("the signature is not 64 bytes of hex"))?;
        key.verify(
            &message(format.context(), &module, code_digest, engine),
            &signature,
        )
        .map_err(|_| Refusal::Altered)
    }
}

/// An artifact format this runtime reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// Signs the inflated code; zstd frames.
    V2,
    /// Signs the packed code; zstd frames.
    V3,
    /// Signs the packed code; LZ4 frames.
    V4,
}

impl Format {
    fn context(self) -> &'static [u8] {
        match self {
            Format::V2 => CONTEXT_V2,
            Format::V3 => CONTEXT_V3,
            Format::V4 => CONTEXT,
        }
    }

    /// Whether it signs the packed code, which is then checked before it is inflated.
    fn signs_packed(self) -> bool {
        self != Format::V2
    }

    fn packing(self) -> Packing {
        match self {
            Format::V4 => Packing::Lz4,
            Format::V2 | Format::V3 => Packing::Zstd,
        }
    }
}

fn message(context: &[u8], module_sha256: &[u8], code_digest: &[u8], engine: &str) -> Vec<u8> {
    let mut message = context.to_vec();
    message.extend_from_slice(module_sha256);
    message.extend_from_slice(code_digest);
    message.extend_from_slice(engine.as_bytes());
    message
}

/// Verified code, in a sealed memory file: what was checked is what is mapped, and nothing
/// (not even this process) can change it afterwards, as it could a file on disk.
#[derive(Debug, Clone)]
pub struct SignedCode(Arc<std::fs::File>);

impl SignedCode {
    /// A path that opens this very file, for wasmtime's loaders that map a path.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.0.as_raw_fd()))
    }
}

impl PartialEq for SignedCode {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SignedCode {}

/// Whether a zip is a signed artifact: it holds a signature file.
pub fn is_artifact<R: Read + Seek>(archive: &zip::ZipArchive<R>) -> bool {
    archive.index_for_name(SIGNATURE_ENTRY).is_some()
}

/// Precompiled code is at most this many times its module, plus `CODE_SLACK` (code has
/// a fixed part, large beside a tiny module), well above what real code measures.
const CODE_PER_MODULE: u64 = 16;
const CODE_SLACK: u64 = 4 << 20;
/// Code inflates from its packed bytes at most this many times (real code far less).
const CODE_PER_PACKED: u64 = 64;

/// The code of a signed artifact, checked against `trust` before any of it is kept (at
/// most `left` bytes of it, and `left` is what remains). The error says why it may not be
/// loaded, for the logs.
///
/// Nothing in the artifact is trusted until the signature checks, and its sizes are only
/// claims: the memory it can make this use is two slices and twice its own bytes, whatever
/// it claims. The signature of the packed code is checked before it is inflated; that of a
/// v2 artifact, over the inflated code, by inflating it once to hash it (letting each
/// slice go), and, once it matches, again into the memory file it is loaded from.
pub fn open_artifact(
    zip_bytes: &[u8],
    archive: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>,
    trust: &Trust,
    left: &mut u64,
) -> Result<SignedCode, Refusal> {
    let malformed = Refusal::Malformed;
    let mut signature = Vec::new();
    archive
        .by_name(SIGNATURE_ENTRY)
        .map_err(|e| malformed(e.to_string()))?
        .take(64 * 1024)
        .read_to_end(&mut signature)
        .map_err(|e| malformed(format!("cannot read {SIGNATURE_ENTRY}: {e}")))?;
    let signature = SignatureFile::parse(&signature)?;
    // Refused for its engine, key or format before a byte of the code is unpacked.
    let key = signature.key(trust)?;
    let format = signature.format()?;
    let packing = format.packing();
    let name = packing.entry();
    // Only what the zip says: the module itself is never unpacked when its code loads.
    let module_size = archive.by_name("exec.wasm").ok().map(|m| m.size());
    let mut entry = archive
        .by_name(name)
        .map_err(|e| malformed(format!("the artifact has no readable {name}: {e}")))?;
    let start = usize::try_from(entry.data_start()).unwrap_or(usize::MAX);
    let packed = match zip_bytes.get(start..start.saturating_add(entry.size() as usize)) {
        // As `wasmloop compile` stores it: read in place (its zip CRC is not checked, the
        // signature covers more).
        Some(stored) if entry.compression() == zip::CompressionMethod::Stored => {
            std::borrow::Cow::Borrowed(stored)
        }
        _ => {
            // Packed code barely deflates (zstd's not at all, LZ4's by a sixth): more of it
            // than that is a deflate bomb, not code.
            let (most, than) = match packing {
                Packing::Lz4 => (2 * zip_bytes.len() as u64, "twice the whole artifact"),
                Packing::Zstd => (zip_bytes.len() as u64, "the whole artifact"),
            };
            let mut packed = Vec::new();
            (&mut entry)
                .take(most + 1)
                .read_to_end(&mut packed)
                .map_err(|e| malformed(format!("cannot read {name}: {e}")))?;
            if packed.len() as u64 > most {
                return Err(malformed(format!(
                    "{name} inflates to more than {than}: it is not code packed by `wasmloop \
                     compile`, which stores it uncompressed"
                )));
            }
            std::borrow::Cow::Owned(packed)
        }
    };
    drop(entry);
    let frames = frames(&packed, packing, module_size, left).map_err(malformed)?;
    let digest = match format.signs_packed() {
        true => *blake3::hash(&packed).as_bytes(),
        false => code_digest_of(&frames).map_err(malformed)?,
    };
    signature.check(format, key, &digest, &trust.engine)?;
    let file = unpack_verified(&frames)?;
    seal(&file).map_err(Refusal::Host)?;
    Ok(SignedCode(Arc::new(file)))
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use frames::LZ4_HEADER;
    use keys::unreadable_key;
    use std::path::Path;

    /// A v2 signature's code digest, as `wasmloop compile` made it before v3: from the
    /// code whole, where `code_digest_of` goes frame by frame.
    fn code_digest(code: &[u8]) -> [u8; 32] {
        let digests: Vec<u8> = code
            .chunks(SLICE)
            .flat_map(|slice| *blake3::hash(slice).as_bytes())
            .collect();
        digest_of_slices(&digests)
    }

    /// Checks a signature file against the code it signs: packed (v3) or inflated (v2).
    fn verify(signature_file: &[u8], code: &[u8], trust: &Trust) -> Result<(), Refusal> {
        let file = SignatureFile::parse(signature_file)?;
        let key = file.key(trust)?;
        let format = file.format()?;
        let digest = match format.signs_packed() {
            true => *blake3::hash(code).as_bytes(),
            false => code_digest(code),
        };
        file.check(format, key, &digest, &trust.engine)
    }

    /// `exec.sig` as wasmloop wrote it before v3: over the inflated code.
    fn sign_v2(key: &SigningKey, module: &[u8], code: &[u8], engine: &str) -> String {
        sign_as(key, CONTEXT_V2, "", module, &code_digest(code), engine)
    }

    /// `exec.sig` of an earlier format: its context, and how its file says which it is.
    fn sign_as(
        key: &SigningKey,
        context: &[u8],
        format: &str,
        module: &[u8],
        code_digest: &[u8],
        engine: &str,
    ) -> String {
        let module = Sha256::digest(module);
        let signature = key.sign(&message(context, &module, code_digest, engine));
        format!(
            "{{{format}\"key\":\"{}\",\"engine\":\"{engine}\",\"module\":\"{}\",\"signature\":\"{}\"}}\n",
            crate::hex(key.verifying_key().as_bytes()),
            crate::hex(&module),
            crate::hex(&signature.to_bytes())
        )
    }

    /// Bytes that pack about as little as machine code does, unlike a repeating pattern.
    fn noise(length: usize) -> Vec<u8> {
        let mut x = 88172645463325252u64;
        (0..length)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Code as `wasmloop compile` packed it for v3: a zstd frame per slice.
    fn pack_v3(code: &[u8]) -> Vec<u8> {
        code.chunks(SLICE)
            .flat_map(|slice| zstd::bulk::compress(slice, 9).unwrap())
            .collect()
    }

    /// What `open_artifact` does with packed code once its zip is read.
    fn unpack(
        packed: &[u8],
        packing: Packing,
        module_size: Option<u64>,
        left: &mut u64,
    ) -> Result<(std::fs::File, [u8; 32]), String> {
        let frames = frames(packed, packing, module_size, left)?;
        let digest = code_digest_of(&frames)?;
        Ok((unpack_verified(&frames).map_err(|e| e.to_string())?, digest))
    }

    #[test]
    fn packed_code_unpacks_to_itself_and_its_digest() {
        // Zeros for a slice that LZ4 shrinks, noise for slices it stores as they are.
        let mut code = vec![0u8; SLICE];
        code.extend(noise(3 * SLICE / 2));
        let lz4 = pack(&code).unwrap();
        assert!(lz4.len() < code.len() && lz4.len() > 3 * SLICE / 2);
        for (packed, packing) in [(lz4, Packing::Lz4), (pack_v3(&code), Packing::Zstd)] {
            let mut left = u64::MAX;
            let (file, digest) = unpack(&packed, packing, None, &mut left).unwrap();
            assert_eq!(digest, code_digest(&code));
            assert_eq!(
                std::fs::read(SignedCode(Arc::new(file)).path()).unwrap(),
                code
            );
            assert_eq!(left, u64::MAX - code.len() as u64);
            // The cap counts the code once inflated.
            let mut small = code.len() as u64 - 1;
            let refused = unpack(&packed, packing, None, &mut small).unwrap_err();
            assert!(refused.contains("--max-unpacked-bytes"), "{refused}");
            let cut = &packed[..packed.len() - 10];
            let refused = unpack(cut, packing, None, &mut u64::MAX.clone()).unwrap_err();
            assert!(refused.contains("truncated"), "{refused}");
            assert!(refused.starts_with(packing.entry()), "{refused}");
        }
    }

    /// What refusing `packed` says, of either packing.
    fn refuse(packed: &[u8], packing: Packing, module: Option<u64>) -> String {
        unpack(packed, packing, module, &mut u64::MAX.clone()).unwrap_err()
    }

    #[test]
    fn zstd_frames_are_held_to_their_slices_whatever_their_headers_say() {
        let code = noise(3 * SLICE);
        let refuse = |packed: &[u8], module| refuse(packed, Packing::Zstd, module);
        // One frame for all the code (another zstd tool's) is larger than a slice.
        let whole = zstd::bulk::compress(&code, 3).unwrap();
        let refused = refuse(&whole, None);
        assert!(refused.contains("1 to 1048576 bytes"), "{refused}");
        // Frames that cut a slice are refused rather than hashed another way.
        let mut cut = zstd::bulk::compress(&code[..1000], 3).unwrap();
        cut.extend(zstd::bulk::compress(&code[1000..SLICE], 3).unwrap());
        let refused = refuse(&cut, None);
        assert!(refused.contains("not whole slices"), "{refused}");
        // A header that says less than the frame holds: it fails in a buffer of that size.
        let mut lying = zstd::bulk::compress(&code[..SLICE], 3).unwrap();
        let honest = lying.clone();
        let declared = zstd::zstd_safe::get_frame_content_size(&lying)
            .unwrap()
            .unwrap();
        assert_eq!(declared, SLICE as u64);
        // The frame header's last 4 bytes hold the size (single segment, 4-byte field).
        let at = lying
            .windows(4)
            .position(|w| w == (SLICE as u32).to_le_bytes())
            .unwrap();
        lying[at..at + 4].copy_from_slice(&1000u32.to_le_bytes());
        let refused = refuse(&lying, None);
        assert!(
            refused.contains("does not inflate to its size"),
            "{refused}"
        );
        // Zeros pack small: claims far beyond the bytes, or beyond the module, are refused
        // before anything is inflated.
        let zeros = pack_v3(&vec![0u8; 200 * SLICE]);
        let refused = refuse(&zeros, None);
        assert!(refused.contains("more than code packs"), "{refused}");
        // Code is checked against its module's size too, with room for code's fixed part.
        assert!(unpack(&honest, Packing::Zstd, Some(1000), &mut u64::MAX.clone()).is_ok());
        let refused = refuse(&pack_v3(&noise(5 * SLICE)), Some(1000));
        assert!(
            refused.contains("far more than its 1000-byte module"),
            "{refused}"
        );
    }

    #[test]
    fn lz4_frames_are_held_to_their_slices_whatever_their_headers_say() {
        let code = noise(3 * SLICE);
        let refuse = |packed: &[u8], module| refuse(packed, Packing::Lz4, module);
        let compress = |slice: &[u8]| {
            let mode = lz4::block::CompressionMode::HIGHCOMPRESSION(LEVEL);
            lz4::block::compress(slice, Some(mode), false).unwrap()
        };
        let zeros = compress(&[0u8; SLICE]);
        // One frame for all the code is larger than a slice, compressed or stored.
        let refused = refuse(&lz4_frame(3 * SLICE as u64, &code, true), None);
        assert!(refused.contains("1 to 1048576 bytes"), "{refused}");
        let refused = refuse(&lz4_frame(480 << 20, &zeros, false), None);
        assert!(refused.contains("inflates to 503316480 bytes"), "{refused}");
        // Frames that cut a slice are refused rather than hashed another way.
        let mut cut = lz4_frame(1000, &code[..1000], true);
        cut.extend(lz4_frame(SLICE as u64, &code[..SLICE], true));
        let refused = refuse(&cut, None);
        assert!(refused.contains("not whole slices"), "{refused}");
        // A header that says less than the block holds: it fails in a buffer of that size,
        // and a stored block must be its size exactly.
        let refused = refuse(&lz4_frame(1000, &zeros, false), None);
        assert!(
            refused.contains("does not inflate to its size"),
            "{refused}"
        );
        let refused = refuse(&lz4_frame(1000, &code[..2000], true), None);
        assert!(
            refused.contains("does not inflate to its size"),
            "{refused}"
        );
        // Saying more than it holds is no better.
        let part = lz4_frame(SLICE as u64, &compress(&code[..20_000]), false);
        let refused = refuse(&part, None);
        assert!(
            refused.contains("a frame smaller than its size"),
            "{refused}"
        );
        // Only the frames it writes: one block, its settings, a header that checks.
        let like_code: Vec<u8> = code[..SLICE / 2].iter().flat_map(|&b| [b, 0]).collect();
        let honest = lz4_frame(SLICE as u64, &compress(&like_code), false);
        assert!(unpack(&honest, Packing::Lz4, Some(1000), &mut u64::MAX.clone()).is_ok());
        let mut two_blocks = honest[..honest.len() - 4].to_vec();
        two_blocks.extend_from_slice(&honest[LZ4_HEADER..]);
        let refused = refuse(&two_blocks, None);
        assert!(refused.contains("more than one block"), "{refused}");
        let mut checksummed = honest.clone();
        checksummed[4] |= 0b100;
        let refused = refuse(&checksummed, None);
        assert!(refused.contains("other settings"), "{refused}");
        let mut altered = honest.clone();
        altered[6] ^= 1;
        let refused = refuse(&altered, None);
        assert!(refused.contains("fails its checksum"), "{refused}");
        let refused = refuse(&pack_v3(&code), None);
        assert!(refused.contains("not an LZ4 frame"), "{refused}");
        // Zeros pack small: claims far beyond the bytes, or beyond the module, are refused
        // before anything is inflated.
        let refused = refuse(&lz4_frame(SLICE as u64, &zeros, false).repeat(480), None);
        assert!(refused.contains("more than code packs"), "{refused}");
        let refused = refuse(&pack(&noise(5 * SLICE)).unwrap(), Some(1000));
        assert!(
            refused.starts_with(
                "exec.cwasm.lz4 says its code is 5242880 bytes, far more than \
                 its 1000-byte module"
            ),
            "{refused}"
        );
    }

    #[test]
    fn artifacts_of_every_format_open_to_their_code() {
        use std::io::Write;
        let key = SigningKey::from_bytes(&[3; 32]);
        let trust = Trust {
            keys: vec![key.verifying_key()],
            engine: "engine-a".to_owned(),
        };
        let code = noise(SLICE + 1000);
        let v4 = pack(&code).unwrap();
        let v3 = pack_v3(&code);
        let v4_file = sign(&key, b"module", &v4, "engine-a");
        let v3_file = sign_as(
            &key,
            CONTEXT_V3,
            "\"format\":3,",
            b"module",
            blake3::hash(&v3).as_bytes(),
            "engine-a",
        );
        let v2_file = sign_v2(&key, b"module", &code, "engine-a");
        let open = |entry: &str, packed: &[u8], signature: &str| {
            let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            let stored = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Stored);
            zip.start_file(SIGNATURE_ENTRY, stored).unwrap();
            zip.write_all(signature.as_bytes()).unwrap();
            zip.start_file(entry, stored).unwrap();
            zip.write_all(packed).unwrap();
            let bytes = zip.finish().unwrap().into_inner();
            let mut archive = zip::ZipArchive::new(std::io::Cursor::new(&bytes[..])).unwrap();
            let opened = open_artifact(&bytes, &mut archive, &trust, &mut u64::MAX.clone());
            opened.map(|code| std::fs::read(code.path()).unwrap())
        };
        assert_eq!(open(CODE_ENTRY, &v4, &v4_file).unwrap(), code);
        assert_eq!(open(CODE_ENTRY_V3, &v3, &v3_file).unwrap(), code);
        assert_eq!(open(CODE_ENTRY_V3, &v3, &v2_file).unwrap(), code);
        // Each format's code is where that format keeps it, packed its way.
        let misplaced = open(CODE_ENTRY_V3, &v4, &v4_file).unwrap_err().to_string();
        assert!(
            misplaced.starts_with("the artifact has no readable exec.cwasm.lz4"),
            "{misplaced}"
        );
        let repacked = open(CODE_ENTRY_V3, &v4, &v3_file).unwrap_err().to_string();
        assert!(
            repacked.starts_with("exec.cwasm.zst is not code packed by `wasmloop compile`"),
            "{repacked}"
        );
    }

    #[test]
    fn a_key_the_user_may_not_read_is_told_how_to_run_as_its_owner() {
        let path = Path::new("/keys/sign.key");
        let refused = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let message = unreadable_key(path, &refused);
        assert!(
            message.starts_with("cannot read the key /keys/sign.key: permission denied")
                && message.contains("--user \"$(id -u)\""),
            "{message}"
        );
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(!unreadable_key(path, &missing).contains("--user"));
    }

    #[test]
    fn a_signature_verifies_only_for_its_key_code_module_and_engine() {
        let dir = tempfile::tempdir().unwrap();
        let (sign_path, verify_path) = keygen(dir.path()).unwrap();
        let key = read_signing_key(&sign_path).unwrap();
        let trusted = vec![read_verify_key(&verify_path).unwrap()];
        let trust = |engine: &str| Trust {
            keys: trusted.clone(),
            engine: engine.to_owned(),
        };
        let file = sign(&key, b"module", b"code", "engine-a");
        assert!(file.starts_with("{\"format\":4,"), "{file}");
        assert_eq!(verify(file.as_bytes(), b"code", &trust("engine-a")), Ok(()));
        // Signed before v4, over the code as zstd packed it: still verified, that way.
        let v3 = sign_as(
            &key,
            CONTEXT_V3,
            "\"format\":3,",
            b"module",
            blake3::hash(b"code").as_bytes(),
            "engine-a",
        );
        assert_eq!(verify(v3.as_bytes(), b"code", &trust("engine-a")), Ok(()));
        // Signed before v3, over the inflated code: still verified, that way.
        let v2 = sign_v2(&key, b"module", b"code", "engine-a");
        assert_eq!(verify(v2.as_bytes(), b"code", &trust("engine-a")), Ok(()));
        // A signature holds only for the format it was made for.
        for other in ["\"format\":3,", ""] {
            let moved = file.replace("\"format\":4,", other);
            assert_eq!(
                verify(moved.as_bytes(), b"code", &trust("engine-a")),
                Err(Refusal::Altered)
            );
        }
        // A format this runtime does not know says so.
        let newer = file.replace("\"format\":4,", "\"format\":5,");
        let newer = verify(newer.as_bytes(), b"code", &trust("engine-a")).unwrap_err();
        assert!(
            newer.to_string().starts_with(
                "exec.sig is of format 5, which this runtime does not read (it reads 2 to 4)"
            ),
            "{newer}"
        );
        let altered = verify(file.as_bytes(), b"c0de", &trust("engine-a"));
        assert_eq!(altered, Err(Refusal::Altered));
        // The module's digest is signed too: another one in the file breaks the signature.
        let other_module = file.replace(
            &crate::hex(&Sha256::digest(b"module")),
            &crate::hex(&Sha256::digest(b"other")),
        );
        assert_ne!(other_module, file);
        let moved = verify(other_module.as_bytes(), b"code", &trust("engine-a"));
        assert_eq!(moved, Err(Refusal::Altered));
        let engine = verify(file.as_bytes(), b"code", &trust("engine-b"));
        assert!(matches!(engine, Err(Refusal::OtherEngine { .. })));
        assert!(engine.unwrap_err().to_string().contains("another engine"));
        let stranger = vec![SigningKey::from_bytes(&[7; 32]).verifying_key()];
        let untrusted = Trust {
            keys: stranger,
            engine: "engine-a".to_owned(),
        };
        let untrusted = verify(file.as_bytes(), b"code", &untrusted);
        assert!(matches!(untrusted, Err(Refusal::UntrustedKey(_))));
        // One key where the other belongs is told apart.
        let swapped = read_signing_key(&verify_path).unwrap_err().to_string();
        assert!(
            swapped.contains("is a verify key, where a sign key belongs"),
            "{swapped}"
        );
        let swapped = read_verify_key(&sign_path).unwrap_err().to_string();
        assert!(
            swapped.contains("is a sign key, where a verify key belongs"),
            "{swapped}"
        );
        // A key is never overwritten.
        assert!(keygen(dir.path()).is_err());
        let mode = std::fs::metadata(&sign_path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
    }
}
