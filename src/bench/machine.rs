//! Which machine and which versions a `hako bench` run is on: CPU model, cores, memory, OS and
//! kernel from `/proc` and `/etc/os-release`, and the versions of hako, the rustc that built
//! it, and each engine crate the run used. It only reads; what is unknown says so.

use std::collections::BTreeMap;

use serde::Serialize;

use super::stats;

/// The machine a run is on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    /// Logical CPUs this process may use.
    pub cores: usize,
    pub memory_bytes: Option<u64>,
    pub os: String,
    pub kernel: String,
    pub arch: &'static str,
}

impl Machine {
    /// This machine.
    pub fn this() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|text| text.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Self {
            cpu: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: stats::status_kib(&meminfo, "MemTotal:").map(|kib| kib * 1024),
            os: os_name(&os_release).unwrap_or_else(|| std::env::consts::OS.to_string()),
            kernel,
            arch: std::env::consts::ARCH,
        }
    }

    /// One line for the table's header.
    pub fn summary(&self) -> String {
        let memory = self
            .memory_bytes
            .map_or("unknown memory".to_string(), |bytes| {
                format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
            });
        format!(
            "{} ({} cores, {memory}), {} {}, kernel {}",
            self.cpu, self.cores, self.os, self.arch, self.kernel
        )
    }
}

/// The first `model name` of `/proc/cpuinfo` (x86), else its `Hardware`/`CPU part` lines.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Hardware", "CPU part"]
        .into_iter()
        .find_map(|field| {
            cpuinfo.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == field).then(|| value.trim().to_string())
            })
        })
        .filter(|model| !model.is_empty())
}

/// `PRETTY_NAME` of `/etc/os-release`.
fn os_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|line| {
        let value = line.strip_prefix("PRETTY_NAME=")?;
        Some(value.trim().trim_matches('"').to_string())
    })
}

/// hako's version, the rustc that built it, and every engine crate's version a run used.
pub fn versions(engines: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    let mut versions = BTreeMap::new();
    versions.insert("hako".to_string(), crate::VERSION.to_string());
    versions.insert("rustc".to_string(), env!("HAKO_RUSTC_VERSION").to_string());
    for (name, version) in engines {
        match versions.get(&name) {
            Some(known) if *known != version => {
                versions.insert(format!("{name} ({version})"), version);
            }
            _ => {
                versions.insert(name, version);
            }
        }
    }
    versions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_model_is_the_first_model_name() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model("processor : 0\n"), None);
    }

    #[test]
    fn the_os_is_its_pretty_name() {
        let release = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n";
        assert_eq!(
            os_name(release).as_deref(),
            Some("Debian GNU/Linux 13 (trixie)")
        );
    }

    #[test]
    fn versions_name_hako_rustc_and_each_engine_once() {
        let versions = versions([
            ("wasmer".to_string(), "7.4.2".to_string()),
            ("wasmer".to_string(), "7.4.2".to_string()),
        ]);
        assert_eq!(versions["wasmer"], "7.4.2");
        assert!(!versions["rustc"].is_empty());
        assert_eq!(versions.len(), 3);
    }
}
