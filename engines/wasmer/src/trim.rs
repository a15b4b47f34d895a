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
//! 95 to 79 µs (see the README's bench section).

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
    Ok(trimmed)
}

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
