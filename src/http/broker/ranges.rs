//! The forbidden destinations: the IANA special-purpose address ranges a guest's request may
//! never reach unless the operator trusts the name. It owns the list and the check of one
//! address, with IPv4-mapped and IPv4-compatible IPv6 addresses re-checked as IPv4; it does
//! not resolve names or decide about trust (see `resolve`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 ranges: network, prefix length, what the range is.
const V4: [(Ipv4Addr, u8, &str); 16] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8, "\"this network\""),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private"),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "shared (carrier-grade NAT)",
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private"),
    (Ipv4Addr::new(192, 0, 0, 0), 24, "IETF protocol assignments"),
    (Ipv4Addr::new(192, 0, 2, 0), 24, "documentation"),
    (Ipv4Addr::new(192, 88, 99, 0), 24, "6to4 relay anycast"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private"),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking"),
    (Ipv4Addr::new(198, 51, 100, 0), 24, "documentation"),
    (Ipv4Addr::new(203, 0, 113, 0), 24, "documentation"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved"),
    (Ipv4Addr::new(255, 255, 255, 255), 32, "broadcast"),
];

/// IPv6 ranges, after the IPv4-embedding forms have been taken apart.
const V6: [(Ipv6Addr, u8, &str); 12] = [
    (Ipv6Addr::UNSPECIFIED, 128, "unspecified"),
    (Ipv6Addr::LOCALHOST, 128, "loopback"),
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96, "NAT64"),
    (
        Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
        48,
        "local-use NAT64",
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
        64,
        "discard-only",
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        "IETF protocol assignments",
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        "documentation",
    ),
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, "6to4"),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        "unique local",
    ),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "link-local"),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, "site-local"),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast"),
];

/// Why `ip` may not be reached by default, or `None` when it may.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let bits = u32::from(ip);
    V4.iter()
        .find(|(net, prefix, _)| in_prefix(bits.into(), u32::from(*net).into(), *prefix, 32))
        .map(|(_, _, what)| *what)
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(ip);
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible) reach the IPv4 address they carry
    // on many stacks: judge them as that address. `::` and `::1` are judged as IPv6 below.
    let mapped = bits >> 32 == 0xffff;
    let compatible = bits >> 32 == 0 && bits > 1;
    if mapped || compatible {
        // The low 32 bits are the IPv4 address.
        return forbidden_v4(Ipv4Addr::from(bits as u32))
            .map(|_| "an IPv6 form of a forbidden IPv4 address");
    }
    V6.iter()
        .find(|(net, prefix, _)| in_prefix(bits, u128::from(*net), *prefix, 128))
        .map(|(_, _, what)| *what)
}

/// Whether the top `prefix` of `width` bits of `bits` and `net` agree.
fn in_prefix(bits: u128, net: u128, prefix: u8, width: u8) -> bool {
    let shift = u32::from(width - prefix);
    if shift >= 128 {
        return true;
    }
    bits >> shift == net >> shift
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_forbidden(text: &str) -> bool {
        forbidden(text.parse().unwrap()).is_some()
    }

    #[test]
    fn every_listed_ipv4_range_is_forbidden_at_both_ends() {
        for (first, last) in [
            ("0.0.0.0", "0.255.255.255"),
            ("10.0.0.0", "10.255.255.255"),
            ("100.64.0.0", "100.127.255.255"),
            ("127.0.0.0", "127.255.255.255"),
            ("169.254.0.0", "169.254.255.255"),
            ("172.16.0.0", "172.31.255.255"),
            ("192.0.0.0", "192.0.0.255"),
            ("192.0.2.0", "192.0.2.255"),
            ("192.88.99.0", "192.88.99.255"),
            ("192.168.0.0", "192.168.255.255"),
            ("198.18.0.0", "198.19.255.255"),
            ("198.51.100.0", "198.51.100.255"),
            ("203.0.113.0", "203.0.113.255"),
            ("224.0.0.0", "239.255.255.255"),
            ("240.0.0.0", "255.255.255.255"),
        ] {
            assert!(is_forbidden(first), "{first}");
            assert!(is_forbidden(last), "{last}");
        }
    }

    #[test]
    fn public_ipv4_addresses_next_to_the_ranges_are_allowed() {
        for ip in [
            "1.1.1.1",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.0",
            "192.88.98.255",
            "192.167.255.255",
            "198.17.255.255",
            "198.20.0.0",
            "203.0.112.255",
            "223.255.255.255",
        ] {
            assert!(!is_forbidden(ip), "{ip}");
        }
    }

    #[test]
    fn every_listed_ipv6_range_is_forbidden() {
        for ip in [
            "::",
            "::1",
            "64:ff9b::8.8.8.8",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:1ff:ffff::1",
            "2001:db8::1",
            "2002:c000:0204::1",
            "fc00::1",
            "fdff:ffff::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "feff::1",
            "ff02::1",
        ] {
            assert!(is_forbidden(ip), "{ip}");
        }
    }

    #[test]
    fn public_ipv6_addresses_are_allowed() {
        for ip in [
            "2606:4700::1111",
            "2a00:1450::1",
            "2001:200::1",
            "100:0:0:1::1",
        ] {
            assert!(!is_forbidden(ip), "{ip}");
        }
    }

    #[test]
    fn ipv4_mapped_and_compatible_forms_are_judged_as_ipv4() {
        assert!(is_forbidden("::ffff:127.0.0.1"));
        assert!(is_forbidden("::ffff:10.1.2.3"));
        assert!(is_forbidden("::ffff:169.254.169.254"));
        assert!(is_forbidden("::127.0.0.1"));
        assert!(is_forbidden("::192.168.1.1"));
        assert!(!is_forbidden("::ffff:1.1.1.1"));
        assert!(!is_forbidden("::8.8.8.8"));
    }

    #[test]
    fn the_reason_names_the_range() {
        assert_eq!(
            forbidden("169.254.169.254".parse().unwrap()),
            Some("link-local")
        );
        assert_eq!(forbidden("::1".parse().unwrap()), Some("loopback"));
    }
}
