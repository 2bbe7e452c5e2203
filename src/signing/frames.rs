//! The code's packing: a frame per 1 MiB slice (LZ4 now, zstd before v4), inflated on every core into a sealed memory file.

use std::os::fd::AsRawFd;

use super::{
    CODE_ENTRY, CODE_ENTRY_V3, CODE_PER_MODULE, CODE_PER_PACKED, CODE_SLACK, LEVEL, Refusal, SLICE,
    digest_of_slices,
};

/// The code as `exec.cwasm.lz4` holds it: an LZ4 frame per slice.
pub fn pack(code: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut packed = Vec::new();
    let mut block = vec![0u8; lz4::block::compress_bound(SLICE)?];
    let mode = lz4::block::CompressionMode::HIGHCOMPRESSION(LEVEL);
    for slice in code.chunks(SLICE) {
        let length = lz4::block::compress_to_buffer(slice, Some(mode), false, &mut block)?;
        // A slice that does not shrink is stored as it is, as the frame format allows.
        let (block, stored) = match block.get(..length) {
            Some(block) if length < slice.len() => (block, false),
            _ => (slice, true),
        };
        packed.extend_from_slice(&lz4_frame(slice.len() as u64, block, stored));
    }
    Ok(packed)
}

/// An LZ4 frame as `exec.cwasm.lz4` holds them: one block, of `size` bytes once inflated
/// (`stored`: as it is), with the size in the header and no checksums (the signature covers
/// every byte). Public for the tests that forge them.
pub fn lz4_frame(size: u64, block: &[u8], stored: bool) -> Vec<u8> {
    let mut frame = lz4_header(size).to_vec();
    let length = block.len() as u32 | if stored { LZ4_STORED } else { 0 };
    frame.extend_from_slice(&length.to_le_bytes());
    frame.extend_from_slice(block);
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame
}

pub(super) const LZ4_MAGIC: u32 = 0x184D_2204;
/// FLG: version 1, independent blocks, the content size; no checksums, no dictionary.
pub(super) const LZ4_FLAGS: u8 = 0b0110_1000;
/// BD: blocks of at most 4 MiB, so that a slice is one block.
pub(super) const LZ4_BLOCKS: u8 = 7 << 4;
pub(super) const LZ4_HEADER: usize = 15;
/// A block's length with this bit set: its bytes are stored, not compressed.
pub(super) const LZ4_STORED: u32 = 1 << 31;

pub(super) fn lz4_header(size: u64) -> [u8; LZ4_HEADER] {
    let mut header = [0u8; LZ4_HEADER];
    header[..4].copy_from_slice(&LZ4_MAGIC.to_le_bytes());
    header[4] = LZ4_FLAGS;
    header[5] = LZ4_BLOCKS;
    header[6..14].copy_from_slice(&size.to_le_bytes());
    header[14] = (xxhash_rust::xxh32::xxh32(&header[4..14], 0) >> 8) as u8;
    header
}

/// How an artifact's code is packed: a frame per slice, of one compressor or the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Packing {
    /// v4: LZ4 frames of one block.
    Lz4,
    /// v3 and v2: zstd frames.
    Zstd,
}

impl Packing {
    /// The zip entry that holds the code.
    pub(super) fn entry(self) -> &'static str {
        match self {
            Packing::Lz4 => CODE_ENTRY,
            Packing::Zstd => CODE_ENTRY_V3,
        }
    }

    /// The frame at the start of `rest`, and its length in bytes: only what its header says
    /// and where it ends, nothing inflated.
    pub(super) fn frame_at(self, rest: &[u8]) -> Result<(Frame<'_>, usize), String> {
        let truncated = || self.not_packed("a truncated frame");
        match self {
            Packing::Zstd => {
                use zstd::zstd_safe;
                let size = zstd_safe::get_frame_content_size(rest)
                    .ok()
                    .flatten()
                    .ok_or_else(|| self.not_packed("a frame without its size"))?;
                let length =
                    zstd_safe::find_frame_compressed_size(rest).map_err(|_| truncated())?;
                let bytes = rest.get(..length).ok_or_else(truncated)?;
                let frame = Frame {
                    bytes,
                    size,
                    stored: false,
                };
                Ok((frame, length))
            }
            Packing::Lz4 => {
                let header = rest.get(..LZ4_HEADER).ok_or_else(truncated)?;
                if header[..4] != LZ4_MAGIC.to_le_bytes() {
                    return Err(self.not_packed("a frame that is not an LZ4 frame"));
                }
                let size = u64::from_le_bytes(header[6..14].try_into().expect("8 bytes"));
                if header[4..6] != [LZ4_FLAGS, LZ4_BLOCKS] {
                    return Err(self.not_packed(
                        "an LZ4 frame of other settings than it writes (independent blocks of \
                         at most 4 MiB, the content size, no checksums, no dictionary)",
                    ));
                }
                if header[..] != lz4_header(size) {
                    return Err(self.not_packed("an LZ4 frame header that fails its checksum"));
                }
                let length = rest.get(LZ4_HEADER..LZ4_HEADER + 4).ok_or_else(truncated)?;
                let length = u32::from_le_bytes(length.try_into().expect("4 bytes"));
                let stored = length & LZ4_STORED != 0;
                let start = LZ4_HEADER + 4;
                let end = start + (length & !LZ4_STORED) as usize;
                let bytes = rest.get(start..end).ok_or_else(truncated)?;
                match rest.get(end..end + 4) {
                    Some(mark) if mark == [0; 4] => {}
                    Some(_) => return Err(self.not_packed("an LZ4 frame of more than one block")),
                    None => return Err(truncated()),
                }
                let frame = Frame {
                    bytes,
                    size,
                    stored,
                };
                Ok((frame, end + 4))
            }
        }
    }

    pub(super) fn not_packed(self, why: &str) -> String {
        format!(
            "{} is not code packed by `wasmloop compile`: {why}",
            self.entry()
        )
    }
}

/// One frame of packed code: what it inflates from (an LZ4 frame's block, a zstd frame
/// whole), and the size of the slice it says it inflates to.
#[derive(Clone, Copy)]
pub(super) struct Frame<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) size: u64,
    /// Its bytes are the slice itself.
    pub(super) stored: bool,
}

/// Packed code split into its frames, all packed one way.
pub(super) struct Frames<'a> {
    pub(super) packing: Packing,
    pub(super) list: Vec<Frame<'a>>,
}

/// Splits packed code into its frames: one per slice of 1 MiB, each whole slice but the
/// last. What the headers say is checked against the bytes there are and the limits
/// before a byte is inflated; it never sizes an allocation.
pub(super) fn frames<'a>(
    packed: &'a [u8],
    packing: Packing,
    module_size: Option<u64>,
    left: &mut u64,
) -> Result<Frames<'a>, String> {
    let name = packing.entry();
    let mut frames: Vec<Frame> = Vec::new();
    let mut rest = packed;
    let mut size = 0u64;
    while !rest.is_empty() {
        let (frame, length) = packing.frame_at(rest)?;
        if frame.size == 0 || frame.size > SLICE as u64 {
            return Err(packing.not_packed(&format!(
                "a frame says it inflates to {} bytes; each holds one slice of code, 1 to \
                 {SLICE} bytes",
                frame.size
            )));
        }
        // Slices are hashed where they lie: only the last frame may end inside one.
        if frames.last().is_some_and(|last| last.size != SLICE as u64) {
            return Err(packing.not_packed("a frame that is not whole slices of 1 MiB"));
        }
        frames.push(frame);
        size += frame.size;
        if size > *left {
            return Err(format!(
                "{name} says it unpacks to more bytes than allowed (see --max-unpacked-bytes)"
            ));
        }
        rest = &rest[length..];
    }
    if size == 0 {
        return Err(packing.not_packed("no code"));
    }
    if size > (packed.len() as u64).saturating_mul(CODE_PER_PACKED) {
        return Err(format!(
            "{name} says its {} packed bytes inflate to {size}, more than code packs (at most \
             {CODE_PER_PACKED} times): not code made by `wasmloop compile`",
            packed.len()
        ));
    }
    if let Some(module) = module_size
        && size
            > module
                .saturating_mul(CODE_PER_MODULE)
                .saturating_add(CODE_SLACK)
    {
        return Err(format!(
            "{name} says its code is {size} bytes, far more than its {module}-byte module could \
             compile to (at most {CODE_PER_MODULE} times it, and 4 MiB): not code made by \
             `wasmloop compile`"
        ));
    }
    *left -= size;
    Ok(Frames {
        packing,
        list: frames,
    })
}

/// What inflates frames on one thread: zstd keeps a context from frame to frame.
pub(super) enum Inflater {
    Lz4,
    Zstd(Box<zstd::bulk::Decompressor<'static>>),
}

impl Inflater {
    pub(super) fn new(packing: Packing) -> Result<Self, String> {
        Ok(match packing {
            Packing::Lz4 => Inflater::Lz4,
            Packing::Zstd => Inflater::Zstd(Box::new(
                zstd::bulk::Decompressor::new()
                    .map_err(|e| format!("cannot inflate {}: {e}", packing.entry()))?,
            )),
        })
    }

    /// Inflates `frame` into `buffer`, exactly its size: a frame that holds more than it
    /// says fails here, in a buffer of that size.
    pub(super) fn inflate<'b>(
        &mut self,
        packing: Packing,
        frame: &Frame<'b>,
        buffer: &'b mut [u8],
    ) -> Result<&'b [u8], String> {
        let size = frame.size as usize;
        let wrong = |e: &dyn std::fmt::Display| {
            packing.not_packed(&format!("a frame that does not inflate to its size: {e}"))
        };
        if frame.stored {
            return match frame.bytes.len() == size {
                true => Ok(frame.bytes),
                false => Err(wrong(&"a stored block of another size")),
            };
        }
        let buffer = &mut buffer[..size];
        let written = match self {
            Inflater::Lz4 => {
                lz4::block::decompress_to_buffer(frame.bytes, Some(size as i32), buffer)
            }
            Inflater::Zstd(decompressor) => decompressor.decompress_to_buffer(frame.bytes, buffer),
        }
        .map_err(|e| wrong(&e))?;
        if written != size {
            return Err(packing.not_packed("a frame smaller than its size"));
        }
        Ok(&buffer[..written])
    }
}

/// Inflates every frame in turn on two threads, each into a buffer of one slice that it
/// reuses (fresh pages are dear on this VM: a new buffer would fault in every page
/// again), and hands each slice to `take` with its index while it is in the cache.
pub(super) fn inflate_each<T: Send>(
    frames: &Frames,
    take: impl Fn(usize, &[u8]) -> Result<T, String> + Sync,
) -> Result<Vec<T>, String> {
    let Frames {
        packing,
        list: frames,
    } = frames;
    // Frames are handed out one at a time, not half each: they inflate at different speeds,
    // and a second thread here sometimes starts milliseconds late.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let inflate_frames = || -> Result<Vec<(usize, T)>, String> {
        let mut inflater = Inflater::new(*packing)?;
        let mut buffer = vec![0u8; SLICE];
        let mut taken = Vec::new();
        loop {
            let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(frame) = frames.get(index) else {
                break;
            };
            let slice = inflater.inflate(*packing, frame, &mut buffer)?;
            taken.push((index, take(index, slice)?));
        }
        Ok(taken)
    };
    // A thread that stops short hands out the frames left, so that the other stops too:
    // once one frame is refused, the code is.
    let inflate = || {
        let taken = inflate_frames();
        if taken.is_err() {
            next.fetch_max(frames.len(), std::sync::atomic::Ordering::Relaxed);
        }
        taken
    };
    let mut taken = std::thread::scope(|scope| {
        // Without a second thread (the system refused one), this one takes every frame.
        let other = std::thread::Builder::new()
            .spawn_scoped(scope, inflate)
            .ok();
        let mine = inflate();
        let theirs = other.map(|other| {
            other
                .join()
                .unwrap_or_else(|_| Err("the inflating thread stopped".to_owned()))
        });
        let mut taken = mine?;
        taken.extend(theirs.transpose()?.unwrap_or_default());
        Ok::<_, String>(taken)
    })?;
    taken.sort_unstable_by_key(|(index, _)| *index);
    Ok(taken.into_iter().map(|(_, t)| t).collect())
}

/// The code's digest, inflated and let go slice by slice.
pub(super) fn code_digest_of(frames: &Frames) -> Result<[u8; 32], String> {
    let digests = inflate_each(frames, |_, slice| Ok(*blake3::hash(slice).as_bytes()))?;
    Ok(digest_of_slices(&digests.concat()))
}

/// Verified code, inflated into a memory file (frames are whole slices but the last).
pub(super) fn unpack_verified(frames: &Frames) -> Result<std::fs::File, Refusal> {
    use std::os::unix::fs::FileExt;
    let file = sealable_memory_file().map_err(Refusal::Host)?;
    let name = frames.packing.entry();
    let in_memory = |e: std::io::Error| format!("cannot hold {name} in memory: {e}");
    // Verified code that does not inflate is still malformed; a write that fails is ours.
    let write_failed = std::sync::atomic::AtomicBool::new(false);
    let inflated = inflate_each(frames, |index, slice| {
        file.write_all_at(slice, (index * SLICE) as u64)
            .map_err(|e| {
                write_failed.store(true, std::sync::atomic::Ordering::Relaxed);
                in_memory(e)
            })
    });
    match inflated {
        Ok(_) => Ok(file),
        Err(message) if write_failed.into_inner() => Err(Refusal::Host(message)),
        Err(message) => Err(Refusal::Malformed(message)),
    }
}

pub(super) fn sealable_memory_file() -> Result<std::fs::File, String> {
    use std::os::fd::FromRawFd;
    // SAFETY: a plain system call; the descriptor it returns is owned by the File.
    let fd = unsafe {
        libc::memfd_create(
            c"wasmloop-signed-code".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(format!(
            "cannot make a memory file for the code: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` was just opened, and nothing else owns it.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

pub(super) fn seal(file: &std::fs::File) -> Result<(), String> {
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: a plain system call on a descriptor `file` owns.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(format!(
            "cannot seal the code's memory file: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
