//! Peak resident memory of this process, for `kivi bench`'s per-configuration children.

/// The most resident memory this process has used so far, in bytes: `VmHWM` from
/// `/proc/self/status` on Linux, `ru_maxrss` elsewhere is not read (no libc dependency),
/// so other systems report the current resident size instead.
pub fn peak_resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| kib_field(&status, "VmHWM:"))
        .unwrap_or_else(current_resident_bytes)
}

/// Resident memory now, in bytes.
pub fn current_resident_bytes() -> u64 {
    kivi_engine::stats::MemoryProbe::new()
        .read()
        .process_resident_bytes
}

/// A `Name:   1234 kB` line of `/proc/self/status`, in bytes.
fn kib_field(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_fields() {
        let status = "Name:\tkivi\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(kib_field(status, "VmHWM:"), Some(2048 * 1024));
        assert_eq!(kib_field(status, "VmPeak:"), None);
        assert!(peak_resident_bytes() > 0);
    }
}
