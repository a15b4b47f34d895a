//! The target code is compiled for: this machine (wasmtime infers its CPU features, and the
//! identity lists the ones wasmtime looks for), or another triple, compiled for a baseline
//! any machine of that architecture runs (x86-64-v2 on x86-64, nothing extra elsewhere).
//!
//! This file only decides the target and its features; it compiles nothing.

use std::str::FromStr;

use hako_engine_api::EngineError;
use target_lexicon::{Architecture, Triple};

/// A target and what code for it may assume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) triple: Triple,
    /// Whether code for this target runs on this machine.
    pub(crate) runs_here: bool,
    /// The CPU features code may use, sorted, in the Rust standard library's spelling.
    pub(crate) cpu_features: Vec<&'static str>,
}

/// The features wasmtime's host detection asks about, per architecture, with the cranelift
/// setting each one turns on.
const X86_64_FEATURES: [(&str, &str); 19] = [
    ("avx", "has_avx"),
    ("avx2", "has_avx2"),
    ("avx512bitalg", "has_avx512bitalg"),
    ("avx512dq", "has_avx512dq"),
    ("avx512f", "has_avx512f"),
    ("avx512vbmi", "has_avx512vbmi"),
    ("avx512vl", "has_avx512vl"),
    ("avx512vnni", "has_avx512vnni"),
    ("avxvnni", "has_avxvnni"),
    ("bmi1", "has_bmi1"),
    ("bmi2", "has_bmi2"),
    ("cmpxchg16b", "has_cmpxchg16b"),
    ("fma", "has_fma"),
    ("lzcnt", "has_lzcnt"),
    ("popcnt", "has_popcnt"),
    ("sse3", "has_sse3"),
    ("sse4.1", "has_sse41"),
    ("sse4.2", "has_sse42"),
    ("ssse3", "has_ssse3"),
];

/// The x86-64-v2 baseline: what every x86-64 server of the last decade has, and enough for
/// cranelift to compile SIMD and float rounding without libcalls.
const X86_64_V2: [&str; 6] = ["cmpxchg16b", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"];

impl Target {
    /// The target for `triple`, or this machine when `triple` is `None` or names this
    /// machine's own triple.
    pub(crate) fn new(triple: Option<&str>) -> Result<Self, EngineError> {
        let host = Triple::host();
        let triple = match triple {
            None => host.clone(),
            Some(text) => Triple::from_str(text).map_err(|err| {
                EngineError::Unsupported(format!("unknown target triple {text:?}: {err}"))
            })?,
        };
        if triple == host {
            return Ok(Self {
                triple,
                runs_here: true,
                cpu_features: host_features(),
            });
        }
        let cpu_features = match triple.architecture {
            Architecture::X86_64 => X86_64_V2.to_vec(),
            _ => Vec::new(),
        };
        Ok(Self {
            triple,
            runs_here: false,
            cpu_features,
        })
    }

    /// The cranelift settings that give code for a foreign target its baseline features
    /// (none for this machine: wasmtime detects them itself).
    pub(crate) fn cranelift_flags(&self) -> Vec<&'static str> {
        if self.runs_here || self.triple.architecture != Architecture::X86_64 {
            return Vec::new();
        }
        X86_64_FEATURES
            .iter()
            .filter(|(name, _)| self.cpu_features.contains(name))
            .map(|(_, flag)| *flag)
            .collect()
    }

    /// The features as the identity spells them: sorted and comma-separated.
    pub(crate) fn features_line(&self) -> String {
        let mut features = self.cpu_features.clone();
        features.sort_unstable();
        features.join(",")
    }
}

/// The CPU features of this machine that wasmtime's code generation may use.
fn host_features() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut found: Vec<&'static str> = X86_64_FEATURES
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| x86_64_detected(name))
            .collect();
        found.sort_unstable();
        found
    }
    #[cfg(target_arch = "aarch64")]
    {
        let mut found: Vec<&'static str> = ["dotprod", "fp16", "i8mm", "lse", "paca"]
            .into_iter()
            .filter(|name| aarch64_detected(name))
            .collect();
        found.sort_unstable();
        found
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Vec::new()
    }
}

#[cfg(target_arch = "x86_64")]
fn x86_64_detected(name: &str) -> bool {
    match name {
        "avx" => std::is_x86_feature_detected!("avx"),
        "avx2" => std::is_x86_feature_detected!("avx2"),
        "avx512bitalg" => std::is_x86_feature_detected!("avx512bitalg"),
        "avx512dq" => std::is_x86_feature_detected!("avx512dq"),
        "avx512f" => std::is_x86_feature_detected!("avx512f"),
        "avx512vbmi" => std::is_x86_feature_detected!("avx512vbmi"),
        "avx512vl" => std::is_x86_feature_detected!("avx512vl"),
        "avx512vnni" => std::is_x86_feature_detected!("avx512vnni"),
        "avxvnni" => std::is_x86_feature_detected!("avxvnni"),
        "bmi1" => std::is_x86_feature_detected!("bmi1"),
        "bmi2" => std::is_x86_feature_detected!("bmi2"),
        "cmpxchg16b" => std::is_x86_feature_detected!("cmpxchg16b"),
        "fma" => std::is_x86_feature_detected!("fma"),
        "lzcnt" => std::is_x86_feature_detected!("lzcnt"),
        "popcnt" => std::is_x86_feature_detected!("popcnt"),
        "sse3" => std::is_x86_feature_detected!("sse3"),
        "sse4.1" => std::is_x86_feature_detected!("sse4.1"),
        "sse4.2" => std::is_x86_feature_detected!("sse4.2"),
        "ssse3" => std::is_x86_feature_detected!("ssse3"),
        _ => false,
    }
}

#[cfg(target_arch = "aarch64")]
fn aarch64_detected(name: &str) -> bool {
    match name {
        "dotprod" => std::arch::is_aarch64_feature_detected!("dotprod"),
        "fp16" => std::arch::is_aarch64_feature_detected!("fp16"),
        "i8mm" => std::arch::is_aarch64_feature_detected!("i8mm"),
        "lse" => std::arch::is_aarch64_feature_detected!("lse"),
        "paca" => std::arch::is_aarch64_feature_detected!("paca"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_triple_and_the_own_triple_are_this_machine() {
        let here = Target::new(None).unwrap();
        assert!(here.runs_here);
        let named = Target::new(Some(&Triple::host().to_string())).unwrap();
        assert_eq!(named, here);
        assert!(here.cranelift_flags().is_empty());
    }

    #[test]
    fn a_foreign_x86_64_target_gets_the_v2_baseline() {
        let foreign = if Triple::host().architecture == Architecture::X86_64 {
            "x86_64-unknown-freebsd"
        } else {
            "x86_64-unknown-linux-gnu"
        };
        let target = Target::new(Some(foreign)).unwrap();
        assert!(!target.runs_here);
        assert_eq!(
            target.features_line(),
            "cmpxchg16b,popcnt,sse3,sse4.1,sse4.2,ssse3"
        );
        assert_eq!(
            target.cranelift_flags(),
            [
                "has_cmpxchg16b",
                "has_popcnt",
                "has_sse3",
                "has_sse41",
                "has_sse42",
                "has_ssse3"
            ]
        );
    }

    #[test]
    fn an_unknown_triple_is_named_in_the_error() {
        let err = Target::new(Some("nonsense-triple-x")).unwrap_err();
        assert!(err.to_string().contains("nonsense-triple-x"), "{err}");
    }
}
