//! The random ids the server hands out: SSE session ids and the request ids under which host
//! failures are logged ([`super::fault`]). Both are random version 4 UUIDs, made here only.
//!
//! What this file does not do: keep ids, or decide what they name.

/// A random version 4 UUID, hyphenated.
pub fn uuid_v4() -> String {
    let mut bytes = [0u8; 16];
    // The OS random source failing is not something a server can serve around.
    getrandom::fill(&mut bytes).expect("the operating system provides random bytes");
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_version_4_uuids() {
        let a = uuid_v4();
        let b = uuid_v4();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'));
        assert!(matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
    }
}
