//! Live processes seen through `/proc`, for the "leaves nothing running" checks.

/// Pids of live (not zombie) processes whose command line (NUL-separated arguments) contains
/// `pattern`.
pub fn live_processes_matching(pattern: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let zombie = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_none_or(|s| s == "Z" || s == "X");
        if !zombie && cmdline.windows(pattern.len()).any(|w| w == pattern) {
            found.push(name);
        }
    }
    found
}
