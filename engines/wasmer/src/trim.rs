//! An ELF image trimmed to what a load reads.
//!
//! Code for this machine's architecture, of every compiler, is stored as a shared object
//! that wasmer links at compile time (see [`crate::WasmerEngine`]). The linker leaves in it
//! sections no load reads: the functions' DWARF (`.debug_*`, about a fifth of the file), the
//! symbol table and its strings, and the linker's `.comment`. A load maps the image's segments
//! and reads only wasmer's own sections (`.w.*`) and `.eh_frame`, but it finds them by parsing
//! the image twice through a small buffered reader that reads each section's name with a seek
//! and a read of its own: every section costs a load four system calls, whatever its size.
//!
//! [`trim`] writes the image again without those sections, at upload, before the artifact is
//! stored. The segments (the code, its unwind tables, the dynamic section) keep their bytes,
//! file offsets and addresses, so the mapped image is the one wasmer linked. Greet's image goes
//! from 20 sections and 385 KiB to 13 and 224 KiB, and wasmer's load of its artifact file from
//! 95 to 79 µs (see the README's bench section). The trimmed image then keeps only the section
//! headers a load reads, wasmer's module section first ([`arrange_headers`]), since a load looks
//! it up by name before anything else and then reads every section's name once more: `cargo
//! bench --bench cold_start -- artifact_load`, greet on cranelift, 111–118 → 96 µs for the
//! module section first; then 8 section headers instead of 13: 0.95× (median of nine
//! interleaved pairs of both builds, 0.91–0.99×; a `hako call` from disk: 29 → 25 `lseek`s).

use object::build::elf::{Builder, Dynamic, SectionData};

/// `image` without the sections no load reads, or `image` itself when it has none.
///
/// Only sections outside the segments are dropped: what is mapped is never touched. An error
/// names what the image held that the rewrite could not keep in place.
pub(crate) fn trim(image: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut builder =
        Builder::read(image.as_slice()).map_err(|err| format!("reading the ELF image: {err}"))?;
    let mut dropped = 0;
    for section in builder.sections.iter_mut() {
        if !section.is_alloc() && unread(&section.name, &section.data) {
            section.delete = true;
            dropped += 1;
        }
    }
    if dropped == 0 {
        return Ok(image);
    }
    // The linker reserves more dynamic entries than it writes, the rest left zero (`DT_NULL`);
    // the builder would write the used ones alone and leave the following file bytes inside the
    // mapped segment. Written as they were, the segment is the bytes it was.
    let entry = if builder.is_64 {
        size_of::<object::elf::Dyn64<object::Endianness>>()
    } else {
        size_of::<object::elf::Dyn32<object::Endianness>>()
    } as u64;
    for section in builder.sections.iter_mut() {
        if let SectionData::Dynamic(entries) = &mut section.data {
            // One entry of the reserved ones is the terminator the builder adds.
            let written = usize::try_from(section.sh_size / entry).unwrap_or(0);
            let padding = Dynamic::Integer {
                tag: object::elf::DT_NULL,
                val: 0,
            };
            entries.resize(written.saturating_sub(1).max(entries.len()), padding);
        }
    }
    // The symbol table goes with its section; no relocation or dynamic entry names its symbols
    // (the image is linked `-z now -Bsymbolic` and wasmer reads none of them).
    if !builder
        .sections
        .iter()
        .any(|section| !section.delete && matches!(section.data, SectionData::Symbol))
    {
        for symbol in builder.symbols.iter_mut() {
            symbol.delete = true;
        }
    }
    let mut trimmed = Vec::with_capacity(image.len());
    builder
        .write(&mut trimmed)
        .map_err(|err| format!("writing the ELF image without its unread sections: {err}"))?;
    arrange_headers(&mut trimmed)
        .map_err(|err| format!("keeping only the section headers a load reads: {err}"))?;
    Ok(trimmed)
}

/// Rewrites the section header table with only the headers a load reads, wasmer's module
/// section first: a load looks that section up by name before anything else, then reads the
/// name of every section once more (each a seek and a read of the file). Kept are the sections
/// outside the segments (wasmer's own, the names' table), and of those inside them the ones
/// wasmer reads by name ([`read_by_name`]), the dynamic symbols and relocations that `object`
/// finds by their type, and whatever these link to; the headers of the rest (`.text`,
/// `.dynamic`, `.gnu.hash`, ...) go, while their bytes stay where the segments map them. Only
/// the header table and the ELF header change: section links and the names' table index are
/// renumbered. Left as it is when a symbol names a section whose index would change (none
/// does in the images wasmer links: their dynamic symbols are the libcalls they import).
fn arrange_headers(image: &mut Vec<u8>) -> Result<(), String> {
    use object::elf::{
        FileHeader64, SectionHeader64, SymbolSection, SHF_ALLOC, SHF_INFO_LINK, SHN_LORESERVE,
        SHT_DYNSYM, SHT_REL, SHT_RELA, SHT_SYMTAB,
    };
    use object::read::elf::{FileHeader as _, SectionHeader as _, Sym as _};
    use object::{Endianness, U16, U32};

    let read = |err: object::read::Error| err.to_string();
    let links_info = |header: &SectionHeader64<Endianness>, endian| {
        let kind = header.sh_type(endian);
        kind == SHT_REL || kind == SHT_RELA || header.sh_flags(endian).contains(SHF_INFO_LINK)
    };
    let (endian, at, order, renumber, names) = {
        let header = FileHeader64::<Endianness>::parse(&**image).map_err(read)?;
        let endian = header.endian().map_err(read)?;
        let sections = header.sections(endian, &**image).map_err(read)?;
        let count = sections.len();
        if count > usize::from(SHN_LORESERVE) {
            return Ok(());
        }
        let Some((first, _)) = sections.section_by_name(endian, MODULE_INFO) else {
            return Ok(());
        };
        let mut keep: Vec<bool> = sections
            .iter()
            .map(|section| {
                let name = sections.section_name(endian, section).unwrap_or_default();
                !section.sh_flags(endian).contains(SHF_ALLOC)
                    || read_by_name(name)
                    || matches!(
                        section.sh_type(endian),
                        SHT_SYMTAB | SHT_DYNSYM | SHT_REL | SHT_RELA
                    )
            })
            .collect();
        keep[0] = true;
        // What a kept section links to is kept, and so on.
        let mut grew = true;
        while grew {
            grew = false;
            for (index, section) in sections.iter().enumerate() {
                if !keep[index] {
                    continue;
                }
                let info = if links_info(section, endian) {
                    section.sh_info(endian) as usize
                } else {
                    0
                };
                for target in [section.sh_link(endian) as usize, info] {
                    if target != 0 && target < count && !keep[target] {
                        keep[target] = true;
                        grew = true;
                    }
                }
            }
        }
        let order: Vec<usize> = [0, first.0]
            .into_iter()
            .chain((1..count).filter(|&index| keep[index] && index != first.0))
            .collect();
        let mut renumber = vec![None; count];
        for (new, &old) in order.iter().enumerate() {
            renumber[old] = Some(new);
        }
        if order.iter().enumerate().all(|(new, &old)| new == old) && order.len() == count {
            return Ok(());
        }
        for kind in [SHT_SYMTAB, SHT_DYNSYM] {
            let symbols = sections.symbols(endian, &**image, kind).map_err(read)?;
            let moved = |symbol: &object::elf::Sym64<Endianness>| {
                let index = usize::from(symbol.st_shndx(endian).0);
                index != 0
                    && index < usize::from(SHN_LORESERVE)
                    && renumber.get(index).copied().flatten() != Some(index)
            };
            if symbols.iter().any(moved) {
                return Ok(());
            }
        }
        let names = usize::from(header.e_shstrndx.get(endian).0);
        let at = usize::try_from(header.e_shoff.get(endian)).map_err(|err| err.to_string())?;
        (endian, at, order, renumber, names)
    };
    let Some(names) = renumber.get(names).copied().flatten() else {
        return Ok(());
    };
    let size = size_of::<SectionHeader64<Endianness>>();
    let table_end = at
        .checked_add(renumber.len() * size)
        .ok_or("the section headers lie past the image")?;
    let table = image
        .get_mut(at..table_end)
        .ok_or("the section headers lie past the image")?;
    let (headers, _) =
        object::pod::slice_from_bytes_mut::<SectionHeader64<Endianness>>(table, renumber.len())
            .map_err(|()| "the section headers are misaligned")?;
    let old = headers.to_vec();
    let new_index =
        |index: u32| renumber.get(index as usize).copied().flatten().unwrap_or(0) as u32;
    for (slot, &from) in headers.iter_mut().zip(&order) {
        let mut header = old[from];
        header.sh_link = U32::new(endian, new_index(header.sh_link(endian)));
        if links_info(&header, endian) {
            header.sh_info = U32::new(endian, new_index(header.sh_info(endian)));
        }
        *slot = header;
    }
    let end = at + order.len() * size;
    // The table is the file's last bytes when the builder wrote it; then the file ends with it.
    if table_end == image.len() {
        image.truncate(end);
    } else {
        image[end..table_end].fill(0);
    }
    let (file_header, _) = object::pod::from_bytes_mut::<FileHeader64<Endianness>>(image)
        .map_err(|()| "the ELF header is misaligned")?;
    file_header.e_shnum = U16::new(endian, order.len() as u16);
    file_header.e_shstrndx = U16::new(endian, SymbolSection(names as u16));
    Ok(())
}

/// Whether wasmer reads a section of this name by its name: its own (`.w.*`: the module, the
/// functions' offsets, the traps), and the unwind tables it registers.
fn read_by_name(name: &[u8]) -> bool {
    name.starts_with(b".w.") || name == b".eh_frame"
}

/// The name of wasmer's module section, which a load looks up first.
const MODULE_INFO: &[u8] = b".w.module_info";

/// Whether a load never reads a section of this name and kind.
fn unread(name: &[u8], data: &SectionData<'_>) -> bool {
    matches!(data, SectionData::Symbol | SectionData::String)
        || name.starts_with(b".debug_")
        || name == b".comment"
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSection, ObjectSegment};

    /// An image as wasmer links one: cranelift's code for this machine.
    fn linked() -> Vec<u8> {
        let engine = crate::WasmerEngine::new(crate::Compiler::Cranelift, None).unwrap();
        // Enough functions that their DWARF and symbols outweigh the headers moved to the end.
        let functions: String = (0..64)
            .map(|i| format!("(func (export \"f{i}\") (param i32) (result i32) local.get 0 i32.const {i} i32.add)"))
            .collect();
        let wasm = wat::parse_str(format!("(module {functions})")).unwrap();
        let module = wasmer::Module::new(&engine.compiling_engine().unwrap(), wasm).unwrap();
        let image = module.serialize().unwrap().to_vec();
        assert!(image.starts_with(crate::ELF_MAGIC), "not an ELF image");
        image
    }

    fn names(image: &[u8]) -> Vec<String> {
        let file = object::File::parse(image).unwrap();
        file.sections()
            .map(|section| section.name().unwrap().to_string())
            .collect()
    }

    #[test]
    fn a_trimmed_image_keeps_what_a_load_reads_and_maps_and_nothing_else() {
        let image = linked();
        let before = names(&image);
        assert!(
            before.iter().any(|name| name.starts_with(".debug_"))
                && before.contains(&".symtab".into()),
            "wasmer's linker no longer writes what this trims: {before:?}"
        );
        let trimmed = trim(image.clone()).unwrap();
        let after = names(&trimmed);
        for name in &after {
            assert!(
                !name.starts_with(".debug_")
                    && ![".symtab", ".strtab", ".comment"].contains(&name.as_str()),
                "{name} left in {after:?}"
            );
        }
        for kept in [
            ".eh_frame",
            ".dynsym",
            ".w.module_info",
            ".w.fn_offsets",
            ".w.traps",
        ] {
            assert!(after.contains(&kept.into()), "{kept} dropped: {after:?}");
        }
        // Relocations, found by their kind, stay whatever their name (this image may have none).
        for relocations in before
            .iter()
            .filter(|name| name.starts_with(".rela") || name.starts_with(".rel."))
        {
            assert!(
                after.contains(relocations),
                "{relocations} dropped: {after:?}"
            );
        }
        // The headers of what is mapped and read by no name go; the bytes stay (below).
        for gone in [".text", ".dynamic"] {
            assert!(before.contains(&gone.into()), "no {gone} in {before:?}");
            assert!(!after.contains(&gone.into()), "{gone} kept: {after:?}");
        }
        // wasmer's module section, looked up first, is the first section; every section
        // still links to the section of the same name, and the names' table is still found.
        assert_eq!(after[0], ".w.module_info", "{after:?}");
        let links = |image: &[u8]| -> Vec<(String, String)> {
            let file = object::read::elf::ElfFile64::<object::Endianness>::parse(image).unwrap();
            let endian = file.endian();
            let sections = file.elf_section_table();
            file.sections()
                .map(|section| {
                    let link = object::read::elf::SectionHeader::sh_link(
                        section.elf_section_header(),
                        endian,
                    );
                    let linked = match link {
                        0 => &b""[..],
                        link => sections
                            .section(object::SectionIndex(link as usize))
                            .and_then(|header| sections.section_name(endian, header))
                            .unwrap(),
                    };
                    (
                        section.name().unwrap().to_string(),
                        String::from_utf8_lossy(linked).into_owned(),
                    )
                })
                .collect()
        };
        let (mut old_links, mut new_links) = (links(&image), links(&trimmed));
        old_links.retain(|(name, _)| after.contains(name));
        old_links.sort();
        new_links.sort();
        assert_eq!(old_links, new_links);
        assert!(
            trimmed.len() < image.len(),
            "{} of {} bytes",
            trimmed.len(),
            image.len()
        );

        // The segments are where they were, and every section in them, with wasmer's own
        // sections, is the same bytes (the ELF header and the old section headers, in the first
        // segment, are all that changes).
        let (old, new) = (
            object::File::parse(&*image).unwrap(),
            object::File::parse(&*trimmed).unwrap(),
        );
        let segments = |file: &object::File| -> Vec<_> {
            file.segments()
                .map(|s| (s.address(), s.size(), s.file_range(), s.flags()))
                .collect()
        };
        assert_eq!(segments(&old), segments(&new));
        // (The section names' own table is written anew.)
        let kept: Vec<&String> = after
            .iter()
            .filter(|name| !name.is_empty() && *name != ".shstrtab")
            .collect();
        for name in kept {
            let section = |file: &object::File| {
                let section = file.section_by_name(name).unwrap();
                (
                    section.address(),
                    section.file_range(),
                    section.data().unwrap().to_vec(),
                )
            };
            let (old_section, new_section) = (section(&old), section(&new));
            if new_section.0 != 0 {
                assert_eq!(old_section, new_section, "{name}");
            } else {
                assert_eq!(old_section.2, new_section.2, "{name}");
            }
        }
        // What lost its header is still in the file where the segments map it.
        for gone in before.iter().filter(|name| !after.contains(name)) {
            let section = old.section_by_name(gone).unwrap();
            if section.address() == 0 {
                continue;
            }
            let (start, size) = section.file_range().unwrap_or_default();
            let range = start as usize..(start + size) as usize;
            assert_eq!(image[range.clone()], trimmed[range], "{gone}");
        }
    }

    #[test]
    fn an_image_trimmed_once_is_left_as_it_is() {
        let trimmed = trim(linked()).unwrap();
        assert_eq!(trim(trimmed.clone()).unwrap(), trimmed);
    }

    #[test]
    fn bytes_that_are_no_elf_image_are_refused_by_name() {
        let err = trim(b"\x7fELF but not one".to_vec()).unwrap_err();
        assert!(err.contains("reading the ELF image"), "{err}");
    }
}
