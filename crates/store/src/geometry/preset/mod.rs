//! Model presets: the TOML schema of `configs/models/*.toml`, its validation into a
//! [`ModelGeometry`], and the built-in presets embedded in the binary.
//!
//! Owns: parsing (serde, unknown keys rejected), every check a user can get wrong, each
//! reported as a [`ConfigError`] naming the file, the dotted key and the reason; the embedded
//! copies of `configs/models/*.toml` so that a binary runs without a config directory.
//!
//! Schema (every key required unless marked optional; sections that do not apply to the
//! `kind` are rejected):
//!
//! ```toml
//! [model]
//! name = "deepseek-v3"         # a-z 0-9 . - _, at most 64 characters
//! kind = "mla"                 # mla | hybrid | gqa
//! layers = 61
//! query_heads = 128
//! block_tokens = 64            # optional; derived from the geometry, must match if given
//!
//! [mla]                        # kind = "mla"
//! kv_lora_rank = 512
//! rope_dim = 64                # even
//! mha_head_dim = 128           # for the MHA-equivalent comparison
//!
//! [hybrid]                     # kind = "hybrid" (DeepSeek-V4)
//! head_dim = 512               # RoPE + content dims of one compressed entry
//! rope_dim = 64                # even, less than head_dim
//! indexer_dim = 128            # CSA indexer key
//! indexer_rope_dim = 64        # even, at most indexer_dim: its trailing dims the model rotates
//! csa_compression = 4          # k1
//! hca_compression = 128        # k2, a multiple of k1
//! swa_window = 128
//! [[hybrid.layer_map]]         # runs in layer order; `schemes` cycles over `count` layers
//! count = 2
//! schemes = ["hca"]            # csa | hca | swa
//!
//! [gqa]                        # kind = "gqa" (accounting only)
//! kv_heads = 8
//! head_dim = 128
//!
//! [precision]                  # f32 | bf16 | f16 | fp8 | fp4, per region
//! c_kv = "bf16"                # mla
//! k_rope = "bf16"              # mla; must be rotatable (f32, bf16, f16)
//! rope = "bf16"                # hybrid; must be rotatable
//! content = "fp8"              # hybrid
//! indexer = "fp4"              # hybrid (an fp4/fp8 indexer with RoPE dims: no ?position)
//! kv = "bf16"                  # gqa
//!
//! [rope]                       # mla; hybrid: its sliding-window-only layers
//! convention = "interleaved"   # interleaved (pairs 2i, 2i+1) | half_split (pairs i, i+d/2)
//! theta = 10000.0
//! [rope.yarn]                  # optional: the model's rope_scaling of type yarn
//! factor = 40.0
//! original_max_position = 4096 # original_max_position_embeddings
//! beta_fast = 32.0
//! beta_slow = 1.0
//! mscale = 1.0                 # optional, with mscale_all_dim: attention factor
//! mscale_all_dim = 1.0         #   mscale(factor, mscale) / mscale(factor, mscale_all_dim)
//! attention_factor = 1.0       # optional, overrides the rule above
//! [rope.longrope]              # optional, not with yarn: type longrope
//! original_max_position = 32768
//! max_position = 32768         # max_position_embeddings
//! short_factors = [1.0, ...]   # exactly rope_dim / 2 each
//! long_factors = [1.0, ...]
//! attention_factor = 1.0       # optional (default: 1, or sqrt(1 + ln s / ln original) for
//!                              #   s = max_position / original_max_position > 1)
//!
//! [compressed_rope]            # hybrid only: every row of its CSA and HCA layers
//! ```
//!
//! The RoPE keys are the model's own `config.json` values; `tests/rope_vectors.rs` checks every
//! built-in preset against the model's transformers classes.

use std::path::Path;

use super::ModelGeometry;
use crate::error::{ConfigError, StoreError};

/// Largest layer count a preset may declare.
pub const LAYERS_MAX: u32 = 1024;
/// Largest width (elements per row of one region, or heads) a preset may declare.
pub const DIMS_MAX: u32 = 65_536;
/// Largest compression, sliding window or block size, in tokens.
pub const TOKENS_MAX: u32 = 65_536;
/// Longest preset name, in bytes.
pub const NAME_LEN_MAX: usize = 64;
/// Largest preset file [`load_dir`] reads, in bytes.
pub const PRESET_FILE_BYTES_MAX: u64 = 1 << 20;
/// Most preset files [`load_dir`] reads from one directory.
pub const PRESET_FILES_MAX: usize = 1024;

/// The built-in presets: `(file name, TOML text)`, embedded from `configs/models/`.
pub const BUILTIN_PRESET_FILES: &[(&str, &str)] = &[
    (
        "deepseek-67b.toml",
        include_str!("../../../../../configs/models/deepseek-67b.toml"),
    ),
    (
        "deepseek-v2-lite.toml",
        include_str!("../../../../../configs/models/deepseek-v2-lite.toml"),
    ),
    (
        "deepseek-v2.toml",
        include_str!("../../../../../configs/models/deepseek-v2.toml"),
    ),
    (
        "deepseek-v3.toml",
        include_str!("../../../../../configs/models/deepseek-v3.toml"),
    ),
    (
        "deepseek-v4-flash.toml",
        include_str!("../../../../../configs/models/deepseek-v4-flash.toml"),
    ),
    (
        "deepseek-v4-pro.toml",
        include_str!("../../../../../configs/models/deepseek-v4-pro.toml"),
    ),
    (
        "gemma-3-27b.toml",
        include_str!("../../../../../configs/models/gemma-3-27b.toml"),
    ),
    (
        "kimi-k2.toml",
        include_str!("../../../../../configs/models/kimi-k2.toml"),
    ),
    (
        "llama-3.1-8b.toml",
        include_str!("../../../../../configs/models/llama-3.1-8b.toml"),
    ),
    (
        "minicpm3-4b.toml",
        include_str!("../../../../../configs/models/minicpm3-4b.toml"),
    ),
    (
        "mistral-7b.toml",
        include_str!("../../../../../configs/models/mistral-7b.toml"),
    ),
    (
        "qwen3-8b.toml",
        include_str!("../../../../../configs/models/qwen3-8b.toml"),
    ),
];

/// Every built-in preset, parsed, in file-name order.
///
/// Panics only if an embedded file is invalid, which `tests/presets.rs` rules out.
pub fn builtin_presets() -> Vec<ModelGeometry> {
    BUILTIN_PRESET_FILES
        .iter()
        .map(|(file, text)| {
            ModelGeometry::from_toml(&format!("<embedded>/{file}"), text)
                .unwrap_or_else(|e| panic!("embedded preset is invalid: {e}"))
        })
        .collect()
}

/// The built-in preset called `name`, if any.
pub fn builtin_preset(name: &str) -> Option<ModelGeometry> {
    builtin_presets().into_iter().find(|g| g.name == name)
}

/// The preset called `name` among `presets`, or [`StoreError::UnknownModel`] listing them.
pub fn lookup<'a>(
    presets: &'a [ModelGeometry],
    name: &str,
) -> Result<&'a ModelGeometry, StoreError> {
    presets
        .iter()
        .find(|g| g.name == name)
        .ok_or_else(|| StoreError::UnknownModel {
            name: name.to_owned(),
            known: presets
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Loads every `*.toml` file of `dir` (not recursive), in file-name order.
///
/// Rejects files over [`PRESET_FILE_BYTES_MAX`], more than [`PRESET_FILES_MAX`] files, and two
/// files declaring the same `model.name`.
pub fn load_dir(dir: &Path) -> Result<Vec<ModelGeometry>, StoreError> {
    let context = |what: &str| format!("{what} preset directory {}", dir.display());
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| StoreError::io(context("reading"), e))? {
        let path = entry
            .map_err(|e| StoreError::io(context("listing"), e))?
            .path();
        if path.is_file() && path.extension().is_some_and(|x| x == "toml") {
            paths.push(path);
        }
    }
    paths.sort();
    if paths.len() > PRESET_FILES_MAX {
        return Err(ConfigError {
            file: dir.display().to_string(),
            key: "*".into(),
            reason: format!("at most {PRESET_FILES_MAX} presets, found {}", paths.len()),
        }
        .into());
    }
    let mut out: Vec<(String, ModelGeometry)> = Vec::with_capacity(paths.len());
    for path in paths {
        let file = path.display().to_string();
        let len = std::fs::metadata(&path)
            .map_err(|e| StoreError::io(format!("reading {file}"), e))?
            .len();
        if len > PRESET_FILE_BYTES_MAX {
            return Err(ConfigError {
                file,
                key: "*".into(),
                reason: format!("at most {PRESET_FILE_BYTES_MAX} bytes, found {len}"),
            }
            .into());
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| StoreError::io(format!("reading {file}"), e))?;
        let g = ModelGeometry::from_toml(&file, &text)?;
        if let Some((other, _)) = out.iter().find(|(_, o)| o.name == g.name) {
            return Err(ConfigError {
                file,
                key: "model.name".into(),
                reason: format!("preset `{}` is already defined in {other}", g.name),
            }
            .into());
        }
        out.push((file, g));
    }
    Ok(out.into_iter().map(|(_, g)| g).collect())
}

impl ModelGeometry {
    /// Parses and validates one preset. `file_label` names it in errors (a path, or
    /// `<embedded>/NAME` for built-ins).
    pub fn from_toml(file_label: &str, text: &str) -> Result<ModelGeometry, ConfigError> {
        let raw: RawPreset = toml::from_str(text).map_err(|e| toml_error(file_label, text, &e))?;
        Check { file: file_label }.preset(raw)
    }
}

mod check;
mod check_attention;
mod check_rope;
mod schema;
mod toml_error;

pub(crate) use check::Check;
use schema::RawPreset;
pub use toml_error::toml_error;
