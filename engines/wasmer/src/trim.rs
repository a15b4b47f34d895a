//! An ELF image trimmed to what a load reads.
//!
//! cranelift code for this machine's architecture is stored as a shared object that wasmer
//! links at compile time (see [`crate::WasmerEngine`]). The linker leaves in it sections no
//! load reads: the functions' DWARF (`.debug_*`, about a fifth of the file), the symbol table
//! and its strings, and the linker's `.comment`. A load maps the image's segments and reads
//! only wasmer's own sections (`.w.*`) and `.eh_frame`, but it finds them by parsing the image
//! twice through a small buffered reader that reads each section's name with a seek and a read
//! of its own: every section costs a load four system calls, whatever its size.
//!
//! [`trim`] writes the image again without those sections, at upload, before the artifact is
//! stored. The segments (the code, its unwind tables, the dynamic section) keep their bytes,
//! file offsets and addresses, so the mapped image is the one wasmer linked. Greet's image goes
//! from 20 sections and 385 KiB to 13 and 224 KiB, and wasmer's load of its artifact file from
//! 95 to 79 µs (see the README's bench section). The trimmed image also has wasmer's module
//! section first among its section headers ([`module_info_first`]), since a load looks it up by
//! name before anything else: `cargo bench --bench cold_start -- artifact_load`, greet on
//! cranelift, 111–118 → 96 µs.

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
    module_info_first(&mut trimmed)
        .map_err(|err| format!("putting wasmer's module section first: {err}"))?;
    Ok(trimmed)
}

/// Swaps the section headers of wasmer's module section and the first section, so that a
/// load, which looks the module section up by name before anything else, reads one section
/// name there rather than one per section before it (each a seek and a read of the file).
/// Only the two headers and what names their indices (section links, the names' table) change:
/// the sections' bytes, and the segments, stay where they were. Left as it is when a symbol
/// names either index (none does in the images wasmer links).
fn module_info_first(image: &mut [u8]) -> Result<(), String> {
    use object::elf::{
        FileHeader64, SectionHeader64, SymbolSection, SHF_INFO_LINK, SHT_DYNSYM, SHT_REL, SHT_RELA,
        SHT_SYMTAB,
    };
    use object::read::elf::{FileHeader as _, SectionHeader as _, Sym as _};
    use object::{Endianness, U16, U32};

    let read = |err: object::read::Error| err.to_string();
    let (endian, at, count, found, names) = {
        let header = FileHeader64::<Endianness>::parse(&*image).map_err(read)?;
        let endian = header.endian().map_err(read)?;
        let sections = header.sections(endian, &*image).map_err(read)?;
        let Some((found, _)) = sections.section_by_name(endian, MODULE_INFO) else {
            return Ok(());
        };
        let found = found.0;
        if found <= 1 || sections.len() > usize::from(object::elf::SHN_LORESERVE) {
            return Ok(());
        }
        for kind in [SHT_SYMTAB, SHT_DYNSYM] {
            let symbols = sections.symbols(endian, &*image, kind).map_err(read)?;
            let named = |symbol: &object::elf::Sym64<Endianness>| {
                let index = symbol.st_shndx(endian).0;
                usize::from(index) == found || index == 1
            };
            if symbols.iter().any(named) {
                return Ok(());
            }
        }
        let names = header.e_shstrndx.get(endian).0;
        let at = usize::try_from(header.e_shoff.get(endian)).map_err(|err| err.to_string())?;
        (endian, at, sections.len(), found, usize::from(names))
    };
    let swapped = |index: usize| match index {
        i if i == found => 1,
        1 => found,
        i => i,
    };
    let size = size_of::<SectionHeader64<Endianness>>();
    let table = image
        .get_mut(at..at + count * size)
        .ok_or("the section headers lie past the image")?;
    let (headers, _) =
        object::pod::slice_from_bytes_mut::<SectionHeader64<Endianness>>(table, count)
            .map_err(|()| "the section headers are misaligned")?;
    headers.swap(1, found);
    for header in headers.iter_mut() {
        let link = header.sh_link(endian) as usize;
        header.sh_link = U32::new(endian, swapped(link) as u32);
        let kind = header.sh_type(endian);
        if kind == SHT_REL || kind == SHT_RELA || header.sh_flags(endian).contains(SHF_INFO_LINK) {
            let info = header.sh_info(endian) as usize;
            header.sh_info = U32::new(endian, swapped(info) as u32);
        }
    }
    let (file_header, _) = object::pod::from_bytes_mut::<FileHeader64<Endianness>>(image)
        .map_err(|()| "the ELF header is misaligned")?;
    file_header.e_shstrndx = U16::new(endian, SymbolSection(swapped(names) as u16));
    Ok(())
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
        let module = wasmer::Module::new(&engine.compiling_engine(), wasm).unwrap();
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
            ".text",
            ".dynamic",
            ".w.module_info",
            ".w.fn_offsets",
            ".w.traps",
        ] {
            assert!(after.contains(&kept.into()), "{kept} dropped: {after:?}");
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
