//! TOML syntax and type errors mapped to the dotted key at their position.

use crate::error::ConfigError;

/// Maps a TOML syntax or serde error to the dotted key at its position.
pub fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim().replace('\n', "; ");
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line = text[..start].matches('\n').count() + 1;
            let mut key = key_at(text, start);
            // serde points a missing field at its table: name the field itself.
            if let Some(field) = missing_field(&message) {
                key = if key.is_empty() {
                    field.to_owned()
                } else {
                    format!("{key}.{field}")
                };
            }
            ConfigError {
                file: file.to_owned(),
                key,
                reason: format!("{message} (line {line})"),
            }
        }
        None => ConfigError {
            file: file.to_owned(),
            key: String::new(),
            reason: message,
        },
    }
}

/// The dotted key whose line holds byte `offset`: the enclosing table header (arrays of tables
/// indexed, `a.b[1]`) joined with the last `key =` seen in that table.
fn key_at(text: &str, offset: usize) -> String {
    let mut header = String::new();
    let mut key: Option<String> = None;
    let mut arrays: Vec<(String, usize)> = Vec::new();
    let mut end = 0;
    for line in text.split_inclusive('\n') {
        end += line.len();
        let t = line.trim();
        if let Some(inner) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let name = inner.trim().to_owned();
            let index = match arrays.iter_mut().find(|(n, _)| *n == name) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    arrays.push((name.clone(), 0));
                    0
                }
            };
            header = format!("{name}[{index}]");
            key = None;
        } else if let Some(inner) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
            header = inner.trim().to_owned();
            key = None;
        } else if let Some((k, _)) = t.split_once('=') {
            let k = k.trim().trim_matches('"');
            let bare = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
            if !k.is_empty() && !t.starts_with('#') && k.chars().all(bare) {
                key = Some(k.to_owned());
            }
        }
        if offset < end {
            break;
        }
    }
    match (header.is_empty(), key) {
        (_, None) => header,
        (true, Some(k)) => k,
        (false, Some(k)) => format!("{header}.{k}"),
    }
}

/// The field named by serde's "missing field `x`" message.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}
