//! Renewing a module's instance in place: the exports a compile adds, and the reset to the state it was made in.

// A fresh instance per activation costs what wasmtime takes to make and end an instance
// (a store, its pool slot's reset, the instance's set-up and end: dear beside a hello's
// own work), not what the guest does. An instance whose only state is its memories and
// mutable globals is made as good as new without any of that: its guest's call is
// abandoned, the pages it wrote are copied back from the state it was instantiated in
// (found with PAGEMAP_SCAN), its globals are set back, and its `_start` runs again with a
// new WASI context. What a fresh instance would differ in is refused as the module is
// compiled (tables or segments its code can change, state outside memories and
// globals) and checked as it is renewed (a memory that grew cannot shrink): such an
// instance is replaced by a new one instead, as before.

use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};

use wasmparser::{CompositeInnerType, ExternalKind, Operator, Parser, Payload, TypeRef, ValType};
use wasmtime::{AsContextMut, Extern, Global, Instance, Memory, Val};

/// The names of the exports a compile adds, followed by the item's index: a module's own
/// exports must not start with them.
const GLOBAL_EXPORT: &str = "wasmloop-global-";
const MEMORY_EXPORT: &str = "wasmloop-memory-";

fn ours(name: &str) -> bool {
    name.starts_with(GLOBAL_EXPORT) || name.starts_with(MEMORY_EXPORT)
}

/// Host pages.
const PAGE: usize = 4096;

/// The module in `bytes`, rewritten so that an instance of it can be renewed in place:
/// each memory's size as the guest sees it is a global of its own (below), and every
/// memory and mutable global is exported under our names; an error says why a module
/// cannot be (for the debug log), and it is then compiled as it is.
///
/// A memory cannot shrink, and a guest's allocator, set back to the state it started in,
/// would grow it again on every activation. So `memory.size` reads the global instead,
/// and `memory.grow` calls a function that moves the global, growing the memory itself
/// only past its real size: after a renewal the guest sees the size it started with, and
/// the pages past it, zeroed by the reset, are reused. What a fresh instance would do
/// differently: an access between the two sizes reads zeros (or what this activation
/// wrote there) where it would trap.
pub fn exported(bytes: &[u8]) -> Result<Vec<u8>, String> {
    // What the rewrite adds takes the indices after the module's own: code that names a
    // global or function the module lacks would reach them, and the rewrite would make an
    // invalid module valid. One that does not validate is left for the compile to refuse.
    wasmparser::Validator::new()
        .validate_all(bytes)
        .map_err(|e| format!("it does not validate: {e}"))?;
    let plan = Plan::of(bytes)?;
    plan.rewrite(bytes)
        .map_err(|e| format!("cannot rewrite it: {e}"))
}

fn export_kind(kind: ExternalKind) -> wasm_encoder::ExportKind {
    match kind {
        ExternalKind::Func | ExternalKind::FuncExact => wasm_encoder::ExportKind::Func,
        ExternalKind::Table => wasm_encoder::ExportKind::Table,
        ExternalKind::Memory => wasm_encoder::ExportKind::Memory,
        ExternalKind::Global => wasm_encoder::ExportKind::Global,
        ExternalKind::Tag => wasm_encoder::ExportKind::Tag,
    }
}

/// What the rewrite adds, at the indices the module leaves free.
#[derive(Debug, Default, PartialEq)]
struct Plan {
    /// Each defined memory's index and initial size in pages.
    memories: Vec<(u32, u64)>,
    /// The module's own mutable globals.
    globals: Vec<u32>,
    /// How many types, functions and globals the module has (imports included): the
    /// added ones follow.
    types: u32,
    functions: u32,
    global_count: u32,
    /// Which function bodies (by their place in the code section) read or grow a memory:
    /// only they are re-encoded.
    sizing: Vec<bool>,
    has_globals: bool,
}

impl Plan {
    /// The global holding memory `m`'s size (by its place among the defined ones).
    fn size_global(&self, m: usize) -> u32 {
        self.global_count + m as u32
    }

    /// The function that grows memory `m`.
    fn grow_function(&self, m: usize) -> u32 {
        self.functions + m as u32
    }

    /// The place among the defined memories of the memory with index `index`.
    fn memory_at(&self, index: u32) -> Option<usize> {
        self.memories.iter().position(|(at, _)| *at == index)
    }

    /// What the module is made of, if an instance's whole state is its memories and
    /// globals; why not otherwise.
    fn of(bytes: &[u8]) -> Result<Plan, String> {
        let mut plan = Plan::default();
        let (mut exports, mut code) = (false, false);
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.map_err(|e| e.to_string())? {
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        match import.map_err(|e| e.to_string())?.ty {
                            TypeRef::Func(_) | TypeRef::FuncExact(_) => plan.functions += 1,
                            // Shared with whatever provides it.
                            _ => return Err("it imports a memory, table, global or tag".into()),
                        }
                    }
                }
                Payload::TypeSection(reader) => {
                    for group in reader {
                        let group = group.map_err(|e| e.to_string())?;
                        for ty in group.types() {
                            if !matches!(ty.composite_type.inner, CompositeInnerType::Func(_)) {
                                return Err(
                                    "it has GC types, whose objects live outside memory".into()
                                );
                            }
                            plan.types += 1;
                        }
                    }
                }
                Payload::FunctionSection(reader) => plan.functions += reader.count(),
                // It runs as the instance is made, before the state a renewal puts back
                // is taken (it could read the first activation's values into it), and a
                // renewal would not run it again.
                Payload::StartSection { .. } => return Err("it has a start function".into()),
                Payload::MemorySection(reader) => {
                    for memory in reader {
                        let memory = memory.map_err(|e| e.to_string())?;
                        if memory.shared {
                            return Err("it has a shared memory".into());
                        }
                        if memory.memory64 || memory.page_size_log2.is_some() {
                            return Err("it has a 64-bit memory or one of custom pages".into());
                        }
                        plan.memories.push((plan.memories.len() as u32, memory.initial));
                    }
                }
                Payload::GlobalSection(reader) => {
                    plan.has_globals = true;
                    for global in reader {
                        let ty = global.map_err(|e| e.to_string())?.ty;
                        if ty.mutable {
                            if !matches!(
                                ty.content_type,
                                ValType::I32 | ValType::I64 | ValType::F32 | ValType::F64 | ValType::V128
                            ) {
                                return Err("it has a mutable global of a reference type".into());
                            }
                            plan.globals.push(plan.global_count);
                        }
                        plan.global_count += 1;
                    }
                }
                Payload::ExportSection(reader) => {
                    exports = true;
                    for export in reader {
                        let name = export.map_err(|e| e.to_string())?.name;
                        if ours(name) {
                            return Err(format!("it exports `{name}`, a name of the runtime's"));
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    code = true;
                    let mut sizing = false;
                    let mut reader = body.get_operators_reader().map_err(|e| e.to_string())?;
                    while !reader.eof() {
                        match reader.read().map_err(|e| e.to_string())? {
                            Operator::TableSet { .. }
                            | Operator::TableGrow { .. }
                            | Operator::TableFill { .. }
                            | Operator::TableCopy { .. }
                            | Operator::TableInit { .. } => {
                                return Err("its code changes a table".into());
                            }
                            Operator::DataDrop { .. } | Operator::ElemDrop { .. } => {
                                return Err("its code drops a segment".into());
                            }
                            Operator::MemorySize { .. } | Operator::MemoryGrow { .. } => {
                                sizing = true;
                            }
                            _ => {}
                        }
                    }
                    plan.sizing.push(sizing);
                }
                _ => {}
            }
        }
        if !exports || !code || plan.types == 0 || plan.memories.is_empty() {
            return Err("it exports nothing, has no code, or no memory of its own".into());
        }
        Ok(plan)
    }

    fn rewrite(&self, bytes: &[u8]) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
        let mut module = wasm_encoder::Module::new();
        let mut code = None;
        let mut entry = 0;
        let mut globals_added = self.has_globals;
        for payload in Parser::new(0).parse_all(bytes) {
            let payload = payload?;
            // Without a global section, the size globals get one of their own where it
            // would have been: before exports, start, elements, data count, code, data.
            if !globals_added
                && let Some((id, _)) = payload.as_section()
                && [7, 8, 9, 10, 11, 12].contains(&id)
            {
                module.section(&self.with_size_globals(wasm_encoder::GlobalSection::new()));
                globals_added = true;
            }
            match payload {
                Payload::TypeSection(reader) => {
                    let mut types = wasm_encoder::TypeSection::new();
                    RoundtripReencoder.parse_type_section(&mut types, reader)?;
                    // The grow functions' type: pages in, the old size (or -1) out.
                    let i32 = wasm_encoder::ValType::I32;
                    types.ty().function([i32], [i32]);
                    module.section(&types);
                }
                Payload::FunctionSection(reader) => {
                    let mut functions = wasm_encoder::FunctionSection::new();
                    RoundtripReencoder.parse_function_section(&mut functions, reader)?;
                    for _ in &self.memories {
                        functions.function(self.types);
                    }
                    module.section(&functions);
                }
                Payload::GlobalSection(reader) => {
                    let mut globals = wasm_encoder::GlobalSection::new();
                    RoundtripReencoder.parse_global_section(&mut globals, reader)?;
                    module.section(&self.with_size_globals(globals));
                }
                Payload::ExportSection(reader) => {
                    let mut exports = wasm_encoder::ExportSection::new();
                    for export in reader {
                        let export = export?;
                        exports.export(export.name, export_kind(export.kind), export.index);
                    }
                    let sizes = (0..self.memories.len()).map(|m| self.size_global(m));
                    for global in self.globals.iter().copied().chain(sizes) {
                        let name = format!("{GLOBAL_EXPORT}{global}");
                        exports.export(&name, wasm_encoder::ExportKind::Global, global);
                    }
                    for (memory, _) in &self.memories {
                        let name = format!("{MEMORY_EXPORT}{memory}");
                        exports.export(&name, wasm_encoder::ExportKind::Memory, *memory);
                    }
                    module.section(&exports);
                }
                Payload::CodeSectionStart { .. } => code = Some(wasm_encoder::CodeSection::new()),
                Payload::CodeSectionEntry(body) => {
                    let section = code.as_mut().ok_or("a function body outside the code section")?;
                    if self.sizing.get(entry).copied().unwrap_or(true) {
                        Sizing(self).parse_function_body(section, body)?;
                    } else {
                        section.raw(&bytes[body.range()]);
                    }
                    entry += 1;
                    if entry == self.sizing.len() {
                        for m in 0..self.memories.len() {
                            section.function(&self.grow_body(m));
                        }
                        module.section(section);
                    }
                }
                other => super::snapshot::keep_section(&mut module, &other, bytes),
            }
        }
        Ok(module.finish())
    }

    /// `globals` followed by one size global per memory, starting at its initial size.
    fn with_size_globals(
        &self,
        mut globals: wasm_encoder::GlobalSection,
    ) -> wasm_encoder::GlobalSection {
        let ty = wasm_encoder::GlobalType {
            val_type: wasm_encoder::ValType::I32,
            mutable: true,
            shared: false,
        };
        for (_, pages) in &self.memories {
            // A 32-bit memory has at most 65,536 pages, as validated.
            let pages = i32::try_from(*pages).unwrap_or(i32::MAX);
            globals.global(ty, &wasm_encoder::ConstExpr::i32_const(pages));
        }
        globals
    }

    /// `memory.grow` for memory `m`: the size the guest sees moves, and the memory grows
    /// only past what it already has. As `memory.grow`: the old size, or -1.
    fn grow_body(&self, m: usize) -> wasm_encoder::Function {
        use wasm_encoder::Instruction as I;
        let (memory, size) = (self.memories[m].0, self.size_global(m));
        // The parameter, then two locals.
        let (delta, old, new) = (0, 1, 2);
        let mut body = wasm_encoder::Function::new([(2, wasm_encoder::ValType::I32)]);
        let refused = [I::I32Const(-1), I::Return, I::End];
        let instructions = [
            &[I::GlobalGet(size), I::LocalSet(old)][..],
            // The new size; on overflow, refused.
            &[
                I::LocalGet(old),
                I::LocalGet(delta),
                I::I32Add,
                I::LocalTee(new),
                I::LocalGet(old),
                I::I32LtU,
                I::If(wasm_encoder::BlockType::Empty),
            ],
            &refused,
            // Past the real size, the memory grows, or refuses as it would have.
            &[
                I::LocalGet(new),
                I::MemorySize(memory),
                I::I32GtU,
                I::If(wasm_encoder::BlockType::Empty),
                I::LocalGet(new),
                I::MemorySize(memory),
                I::I32Sub,
                I::MemoryGrow(memory),
                I::I32Const(-1),
                I::I32Eq,
                I::If(wasm_encoder::BlockType::Empty),
            ],
            &refused,
            &[I::End],
            &[I::LocalGet(new), I::GlobalSet(size), I::LocalGet(old), I::End],
        ];
        for instruction in instructions.into_iter().flatten() {
            body.instruction(instruction);
        }
        body
    }
}

/// Re-encodes a function body with each `memory.size` reading the size global and each
/// `memory.grow` calling the grow function.
struct Sizing<'a>(&'a Plan);

impl wasm_encoder::reencode::Reencode for Sizing<'_> {
    type Error = std::convert::Infallible;

    fn instruction<'a>(
        &mut self,
        operator: Operator<'a>,
    ) -> Result<wasm_encoder::Instruction<'a>, wasm_encoder::reencode::Error<Self::Error>> {
        let plan = self.0;
        Ok(match operator {
            Operator::MemorySize { mem } if let Some(m) = plan.memory_at(mem) => {
                wasm_encoder::Instruction::GlobalGet(plan.size_global(m))
            }
            Operator::MemoryGrow { mem } if let Some(m) = plan.memory_at(mem) => {
                wasm_encoder::Instruction::Call(plan.grow_function(m))
            }
            other => wasm_encoder::reencode::utils::instruction(self, other)?,
        })
    }
}

/// What a renewable module's instances start from: each memory's contents and each
/// mutable global's value, as they were once the instance was made. Taken from the first
/// instance; every instance of the same code starts the same.
pub struct Baseline {
    memories: Vec<Image>,
    globals: Vec<Val>,
}

/// A memory's initial contents: its size, and its pages that are not all zeros.
struct Image {
    pages: Vec<Option<Box<[u8]>>>,
}

impl Image {
    fn of(data: &[u8]) -> Image {
        let pages = data
            .chunks(PAGE)
            .map(|page| (page.iter().any(|byte| *byte != 0)).then(|| page.into()))
            .collect();
        Image { pages }
    }

    /// Puts back the bytes `range` of the memory held in `data`.
    fn restore(&self, data: &mut [u8], range: std::ops::Range<usize>) {
        let mut at = range.start;
        while at < range.end {
            let page = at / PAGE;
            let end = ((page + 1) * PAGE).min(range.end);
            let within = at - page * PAGE..end - page * PAGE;
            match self.pages.get(page).and_then(Option::as_ref) {
                Some(bytes) => data[at..end].copy_from_slice(&bytes[within]),
                None => data[at..end].fill(0),
            }
            at = end;
        }
    }
}

/// Why an instance cannot be renewed now: it is replaced instead.
#[derive(Debug, thiserror::Error)]
pub enum NotRenewed {
    #[error("it wrote more than {0} bytes of memory")]
    WroteTooMuch(usize),
    #[error("this host cannot tell the pages written (PAGEMAP_SCAN: Linux 6.7)")]
    NoPagemap,
    #[error("{0}")]
    Wasmtime(wasmtime::Error),
}

/// One instance's means of going back to its baseline.
pub struct Renewal {
    memories: Vec<Memory>,
    globals: Vec<Global>,
    baseline: Arc<Baseline>,
    /// The most bytes a renewal copies back: past that, a new instance (whose pool slot
    /// decommits the excess) is cheaper than copying it every time.
    most: usize,
}

impl Renewal {
    /// The means to renew `instance` (just made, none of its code run but its start
    /// function), if its module was compiled renewable and this host can tell the pages it
    /// writes. `baseline` is its code's, taken from this instance if not yet.
    pub fn of(
        mut store: impl AsContextMut,
        instance: &Instance,
        baseline: &OnceLock<Arc<Baseline>>,
        most: usize,
    ) -> Option<Renewal> {
        let pagemap = pagemap()?;
        let mut store = store.as_context_mut();
        let mut memories = Vec::new();
        let mut globals = Vec::new();
        let exports: Vec<(String, Extern)> = instance
            .exports(&mut store)
            .filter(|export| ours(export.name()))
            .map(|export| (export.name().to_owned(), export.into_extern()))
            .collect();
        // In the order they were exported: by index.
        for (name, export) in exports {
            match export {
                Extern::Memory(memory) if name.starts_with(MEMORY_EXPORT) => memories.push(memory),
                Extern::Global(global) if name.starts_with(GLOBAL_EXPORT) => globals.push(global),
                _ => return None,
            }
        }
        if memories.is_empty() {
            return None;
        }
        let baseline = baseline
            .get_or_init(|| {
                let images = memories
                    .iter()
                    .map(|memory| {
                        let data = memory.data_mut(&mut store);
                        let image = Image::of(data);
                        // Reading it mapped the shared zero page wherever it read nothing
                        // yet, and every later scan would walk those entries: they go.
                        pagemap.forget_zero_pages(data);
                        image
                    })
                    .collect();
                Arc::new(Baseline {
                    memories: images,
                    globals: globals.iter().map(|global| global.get(&mut store)).collect(),
                })
            })
            .clone();
        Some(Renewal {
            memories,
            globals,
            baseline,
            most,
        })
    }

    /// Puts the instance's memories and globals back as they were when it was made. Its
    /// code must not be running.
    pub fn reset(&self, mut store: impl AsContextMut) -> Result<(), NotRenewed> {
        let mut store = store.as_context_mut();
        let pagemap = pagemap().ok_or(NotRenewed::NoPagemap)?;
        for (memory, image) in self.memories.iter().zip(&self.baseline.memories) {
            // Grown or not, as a renewed guest sees it only its first size (`exported`):
            // the pages past it that it wrote are zeroed like the others.
            let data = memory.data_mut(&mut store);
            let written = pagemap
                .written(data, self.most)
                .ok_or(NotRenewed::WroteTooMuch(self.most))?;
            for range in written {
                image.restore(data, range);
            }
        }
        for (global, value) in self.globals.iter().zip(&self.baseline.globals) {
            global
                .set(&mut store, *value)
                .map_err(NotRenewed::Wasmtime)?;
        }
        Ok(())
    }
}

/// This process's page map, if it answers PAGEMAP_SCAN.
fn pagemap() -> Option<&'static PageMap> {
    static PAGEMAP: OnceLock<Option<PageMap>> = OnceLock::new();
    PAGEMAP.get_or_init(PageMap::open).as_ref()
}

/// `/proc/self/pagemap`, asked which pages of a range were written (Linux 6.7 and later).
struct PageMap(std::fs::File);

/// The kernel's `struct pm_scan_arg` (linux/fs.h).
#[repr(C)]
#[derive(Default)]
struct ScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// The kernel's `struct page_region`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// Page categories (`PAGE_IS_*`).
const FILE: u64 = 1 << 2;
const PRESENT: u64 = 1 << 3;
const SWAPPED: u64 = 1 << 4;
const PFNZERO: u64 = 1 << 5;

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 =
    (3 << 30) | ((std::mem::size_of::<ScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;

/// What a scan looks for.
#[derive(Clone, Copy)]
enum ScanFor {
    /// Pages the process has its own copy of, at most this many (0: any number).
    Own { max_pages: usize },
    /// Pages that map the shared zero page.
    ZeroPages,
}

/// Regions asked for at once.
const REGIONS: usize = 32;

impl PageMap {
    fn open() -> Option<PageMap> {
        let pagemap = PageMap(std::fs::File::open("/proc/self/pagemap").ok()?);
        // An empty scan: refused where the ioctl does not exist.
        pagemap.scan(0, 0, ScanFor::ZeroPages, &mut [PageRegion::default()])?;
        Some(pagemap)
    }

    /// The ranges of `data` (page-aligned, as a linear memory is) whose pages the process
    /// has its own copy of: written since they were mapped, whether by the guest or by a
    /// reset that copied them back. None past `most` bytes of them.
    fn written(&self, data: &mut [u8], most: usize) -> Option<Vec<std::ops::Range<usize>>> {
        let limit = most / PAGE;
        let mut found = Vec::new();
        let mut pages = 0;
        let mut regions = [PageRegion::default(); REGIONS];
        let base = data.as_ptr() as u64;
        let mut from = 0usize;
        while from < data.len() {
            // One page past the limit, so that going past it shows (0 would be no limit).
            let (walked, count) = self.scan(
                base + from as u64,
                (data.len() - from) as u64,
                ScanFor::Own {
                    max_pages: limit + 1 - pages,
                },
                &mut regions,
            )?;
            for region in &regions[..count] {
                let range = (region.start - base) as usize..(region.end - base) as usize;
                pages += range.len() / PAGE;
                found.push(range);
            }
            if pages > limit || walked == 0 {
                return None;
            }
            from += walked;
        }
        Some(found)
    }

    /// Unmaps the pages of `data` that map the shared zero page: they read as zeros
    /// again, faulted in on demand, as before anything read them.
    fn forget_zero_pages(&self, data: &mut [u8]) {
        let base = data.as_ptr() as u64;
        let mut regions = [PageRegion::default(); REGIONS];
        let mut from = 0;
        while from < data.len() {
            let Some((walked, count)) = self.scan(
                base + from as u64,
                (data.len() - from) as u64,
                ScanFor::ZeroPages,
                &mut regions,
            ) else {
                return;
            };
            for region in &regions[..count] {
                // SAFETY: the range lies within `data`, which we hold exclusively, and
                // maps only the zero page: dropping it changes no byte anyone reads.
                unsafe {
                    libc::madvise(
                        region.start as *mut libc::c_void,
                        (region.end - region.start) as usize,
                        libc::MADV_DONTNEED,
                    );
                }
            }
            if walked == 0 {
                return;
            }
            from += walked;
        }
    }

    /// One PAGEMAP_SCAN of `len` bytes at `start`: how far it walked, and how many regions
    /// it filled.
    fn scan(
        &self,
        start: u64,
        len: u64,
        what: ScanFor,
        regions: &mut [PageRegion],
    ) -> Option<(usize, usize)> {
        let mut arg = ScanArg {
            size: std::mem::size_of::<ScanArg>() as u64,
            start,
            end: start + len,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            ..ScanArg::default()
        };
        match what {
            // Pages the process has its own copy of: neither the shared zero page nor a
            // page of the memory image's file, in memory or swapped out.
            ScanFor::Own { max_pages } => {
                arg.max_pages = max_pages as u64;
                arg.category_inverted = PFNZERO | FILE;
                arg.category_mask = PFNZERO | FILE;
                arg.category_anyof_mask = PRESENT | SWAPPED;
            }
            ScanFor::ZeroPages => arg.category_mask = PFNZERO,
        }
        // SAFETY: the kernel reads `arg`, writes at most `vec_len` regions to `vec` (both
        // ours, alive for the call) and `walk_end`; the range is only looked up, not
        // touched.
        let count = unsafe { libc::ioctl(self.0.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        let count = usize::try_from(count).ok()?;
        Some(((arg.walk_end - start) as usize, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Engine, Module, Store};

    /// Writes a byte and sets its global to it; tells both back; grows its memory.
    const SCRIBBLER: &str = r#"
        (module
          (memory (export "memory") 2)
          (global $last (mut i32) (i32.const 7))
          (data (i32.const 100) "hello")
          (func (export "scribble") (param $at i32) (param $byte i32)
            (i32.store8 (local.get $at) (local.get $byte))
            (global.set $last (local.get $byte)))
          (func (export "peek") (param $at i32) (result i32)
            (i32.load8_u (local.get $at)))
          (func (export "last") (result i32) (global.get $last))
          (func (export "grow") (result i32) (memory.grow (i32.const 1)))
          (func (export "size") (result i32) (memory.size)))
    "#;

    fn refused(wat: &str) -> String {
        exported(&wat::parse_str(wat).unwrap()).unwrap_err()
    }

    fn export_names(bytes: &[u8]) -> Vec<String> {
        let mut names = Vec::new();
        for payload in Parser::new(0).parse_all(bytes) {
            if let Payload::ExportSection(reader) = payload.unwrap() {
                names.extend(reader.into_iter().map(|e| e.unwrap().name.to_owned()));
            }
        }
        names
    }

    #[test]
    fn a_module_whose_state_is_memories_and_globals_exports_them_beside_its_own() {
        let bytes = exported(&wat::parse_str(SCRIBBLER).unwrap()).unwrap();
        assert_eq!(
            export_names(&bytes),
            [
                "memory",
                "scribble",
                "peek",
                "last",
                "grow",
                "size",
                "wasmloop-global-0",
                "wasmloop-global-1",
                "wasmloop-memory-0"
            ]
        );
    }

    #[test]
    fn a_module_without_globals_gets_a_section_for_its_memorys_size() {
        let wat = r#"(module (memory (export "m") 1)
            (func (export "grow") (result i32) (memory.grow (i32.const 1)))
            (func (export "size") (result i32) (memory.size)))"#;
        let bytes = exported(&wat::parse_str(wat).unwrap()).unwrap();
        let engine = Engine::default();
        let module = Module::new(&engine, bytes).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let grow = instance.get_typed_func::<(), i32>(&mut store, "grow").unwrap();
        let size = instance.get_typed_func::<(), i32>(&mut store, "size").unwrap();
        assert_eq!(grow.call(&mut store, ()).unwrap(), 1);
        assert_eq!(size.call(&mut store, ()).unwrap(), 2);
        let size_global = instance.get_global(&mut store, "wasmloop-global-0").unwrap();
        assert_eq!(size_global.get(&mut store).i32(), Some(2));
    }

    #[test]
    fn state_a_renewal_cannot_put_back_makes_a_module_unrenewable() {
        let table = "(module (memory 1) (table 1 funcref) (export \"m\" (memory 0))
            (func (table.set 0 (i32.const 0) (ref.null func))))";
        assert_eq!(refused(table), "its code changes a table");
        let segment = "(module (memory 1) (data \"x\") (export \"m\" (memory 0))
            (func (data.drop 0)))";
        assert_eq!(refused(segment), "its code drops a segment");
        let imported = "(module (import \"env\" \"memory\" (memory 1)) (func (export \"f\")))";
        assert_eq!(refused(imported), "it imports a memory, table, global or tag");
        let ours = "(module (memory (export \"wasmloop-memory-0\") 1))";
        assert_eq!(refused(ours), "it exports `wasmloop-memory-0`, a name of the runtime's");
        let shared = "(module (memory (export \"m\") 1 1 shared))";
        assert_eq!(refused(shared), "it has a shared memory");
        let reference = "(module (memory (export \"m\") 1) (global (mut funcref) (ref.null func)))";
        assert_eq!(refused(reference), "it has a mutable global of a reference type");
        let started = "(module (memory (export \"m\") 1) (func $init) (start $init))";
        assert_eq!(refused(started), "it has a start function");
    }

    #[test]
    fn a_module_that_does_not_validate_is_not_made_valid_by_the_rewrite() {
        // No global of its own: index 0 would be the size global the rewrite adds.
        let invalid = "(module (memory (export \"m\") 1)
            (func (export \"f\") (global.set 0 (i32.const 0)) (drop (memory.size))))";
        let why = exported(&wat::parse_str(invalid).unwrap()).unwrap_err();
        assert!(why.starts_with("it does not validate: "), "{why}");
    }

    struct Scribbler {
        store: Store<()>,
        instance: Instance,
        renewal: Renewal,
    }

    impl Scribbler {
        fn new(most: usize) -> Scribbler {
            let engine = Engine::default();
            let bytes = exported(&wat::parse_str(SCRIBBLER).unwrap()).unwrap();
            let module = Module::new(&engine, bytes).unwrap();
            let mut store = Store::new(&engine, ());
            let instance = Instance::new(&mut store, &module, &[]).unwrap();
            let baseline = OnceLock::new();
            let renewal = Renewal::of(&mut store, &instance, &baseline, most)
                .expect("PAGEMAP_SCAN (Linux 6.7 or later) tells the pages a guest wrote");
            Scribbler {
                store,
                instance,
                renewal,
            }
        }

        fn call<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(&mut self, name: &str, params: P) -> R {
            let func = self
                .instance
                .get_typed_func::<P, R>(&mut self.store, name)
                .unwrap();
            func.call(&mut self.store, params).unwrap()
        }
    }

    #[test]
    fn a_renewal_puts_back_every_page_written_and_every_global() {
        let mut guest = Scribbler::new(1 << 20);
        for round in 0..3 {
            // A byte of the data segment, one of a page that was all zeros, and the
            // memory's last byte.
            for at in [100, 70_000, 131_071] {
                guest.call::<(i32, i32), ()>("scribble", (at, 0x41 + round));
            }
            assert_eq!(guest.call::<i32, i32>("peek", 70_000), 0x41 + round);
            guest.renewal.reset(&mut guest.store).unwrap();
            assert_eq!(guest.call::<i32, i32>("peek", 100), i32::from(b'h'), "round {round}");
            assert_eq!(guest.call::<i32, i32>("peek", 70_000), 0, "round {round}");
            assert_eq!(guest.call::<i32, i32>("peek", 131_071), 0, "round {round}");
            assert_eq!(guest.call::<(), i32>("last", ()), 7, "round {round}");
        }
    }

    #[test]
    fn a_memory_that_grew_is_seen_at_its_first_size_again_and_reused() {
        let mut guest = Scribbler::new(1 << 20);
        for round in 0..3 {
            assert_eq!(guest.call::<(), i32>("grow", ()), 2, "round {round}");
            assert_eq!(guest.call::<(), i32>("size", ()), 3);
            guest.call::<(i32, i32), ()>("scribble", (140_000, 5));
            guest.renewal.reset(&mut guest.store).unwrap();
            assert_eq!(guest.call::<(), i32>("size", ()), 2, "round {round}");
            // Past the size it sees, what the last activation wrote is gone.
            assert_eq!(guest.call::<i32, i32>("peek", 140_000), 0, "round {round}");
        }
        let real = guest.instance.get_memory(&mut guest.store, "memory").unwrap();
        assert_eq!(real.size(&guest.store), 3, "grown once, reused since");
    }

    #[test]
    fn a_guest_that_wrote_past_the_limit_is_not_renewed() {
        let mut guest = Scribbler::new(PAGE);
        guest.call::<(i32, i32), ()>("scribble", (100, 1));
        guest.renewal.reset(&mut guest.store).unwrap();
        guest.call::<(i32, i32), ()>("scribble", (100, 1));
        guest.call::<(i32, i32), ()>("scribble", (70_000, 1));
        assert!(matches!(
            guest.renewal.reset(&mut guest.store),
            Err(NotRenewed::WroteTooMuch(PAGE))
        ));
    }

    #[test]
    fn an_image_restores_ranges_across_pages_with_and_without_contents() {
        let mut initial = vec![0u8; 3 * PAGE];
        initial[PAGE + 5] = 9;
        let image = Image::of(&initial);
        assert!(image.pages[0].is_none() && image.pages[1].is_some() && image.pages[2].is_none());
        let mut memory = vec![0xffu8; 3 * PAGE];
        image.restore(&mut memory, PAGE / 2..PAGE * 5 / 2);
        assert!(memory[..PAGE / 2].iter().all(|b| *b == 0xff));
        assert_eq!(&memory[PAGE / 2..PAGE * 5 / 2], &initial[PAGE / 2..PAGE * 5 / 2]);
        assert!(memory[PAGE * 5 / 2..].iter().all(|b| *b == 0xff));
    }
}
