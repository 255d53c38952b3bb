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
//! csa_compression = 4          # k1
//! hca_compression = 128        # k2, a multiple of k1
//! swa_window = 128
//! [[hybrid.layer_map]]         # runs in layer order; `schemes` cycles over `count` layers
//! count = 2
//! schemes = ["swa"]            # csa | hca | swa
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
//! indexer = "fp4"              # hybrid
//! kv = "bf16"                  # gqa
//!
//! [rope]                       # mla and hybrid (for hybrid: sliding-window rows)
//! convention = "interleaved"   # interleaved (pairs 2i, 2i+1) | half_split (pairs i, i+d/2)
//! theta = 10000.0
//! factors = [1.0, 1.0]         # optional, exactly rope_dim / 2 per-pair divisors (LongRoPE)
//! [rope.yarn]                  # optional, not together with `factors`
//! factor = 40.0
//! original_max_position = 4096
//! beta_fast = 32.0
//! beta_slow = 1.0
//!
//! [compressed_rope]            # hybrid only: RoPE of CSA/HCA entries, same keys as [rope]
//! ```

use std::path::Path;

use serde::Deserialize;

use super::{
    lcm, Attention, GqaGeometry, HybridGeometry, LayerScheme, MlaGeometry, ModelGeometry, ModelKind,
};
use crate::dtype::Dtype;
use crate::error::{ConfigError, StoreError};
use crate::rope::{RopeConvention, RopeScaling, RopeSpec, POSITION_MAX};

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
        include_str!("../../../../configs/models/deepseek-67b.toml"),
    ),
    (
        "deepseek-v2-lite.toml",
        include_str!("../../../../configs/models/deepseek-v2-lite.toml"),
    ),
    (
        "deepseek-v2.toml",
        include_str!("../../../../configs/models/deepseek-v2.toml"),
    ),
    (
        "deepseek-v3.toml",
        include_str!("../../../../configs/models/deepseek-v3.toml"),
    ),
    (
        "deepseek-v4-pro.toml",
        include_str!("../../../../configs/models/deepseek-v4-pro.toml"),
    ),
    (
        "gemma-3-27b.toml",
        include_str!("../../../../configs/models/gemma-3-27b.toml"),
    ),
    (
        "kimi-k2.toml",
        include_str!("../../../../configs/models/kimi-k2.toml"),
    ),
    (
        "llama-3.1-8b.toml",
        include_str!("../../../../configs/models/llama-3.1-8b.toml"),
    ),
    (
        "minicpm3-4b.toml",
        include_str!("../../../../configs/models/minicpm3-4b.toml"),
    ),
    (
        "mistral-7b.toml",
        include_str!("../../../../configs/models/mistral-7b.toml"),
    ),
    (
        "qwen3-8b.toml",
        include_str!("../../../../configs/models/qwen3-8b.toml"),
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

// ---- raw schema -------------------------------------------------------------------------
// Every field is optional here so that a missing key is reported with its dotted path.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPreset {
    model: Option<RawModel>,
    mla: Option<RawMla>,
    hybrid: Option<RawHybrid>,
    gqa: Option<RawGqa>,
    precision: Option<RawPrecision>,
    rope: Option<RawRope>,
    compressed_rope: Option<RawRope>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    name: Option<String>,
    kind: Option<String>,
    layers: Option<u32>,
    query_heads: Option<u32>,
    block_tokens: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMla {
    kv_lora_rank: Option<u32>,
    rope_dim: Option<u32>,
    mha_head_dim: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHybrid {
    head_dim: Option<u32>,
    rope_dim: Option<u32>,
    indexer_dim: Option<u32>,
    csa_compression: Option<u32>,
    hca_compression: Option<u32>,
    swa_window: Option<u32>,
    layer_map: Option<Vec<RawRun>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    count: Option<u32>,
    schemes: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGqa {
    kv_heads: Option<u32>,
    head_dim: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrecision {
    c_kv: Option<String>,
    k_rope: Option<String>,
    rope: Option<String>,
    content: Option<String>,
    indexer: Option<String>,
    kv: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRope {
    convention: Option<String>,
    theta: Option<f64>,
    factors: Option<Vec<f64>>,
    yarn: Option<RawYarn>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawYarn {
    factor: Option<f64>,
    original_max_position: Option<u64>,
    beta_fast: Option<f64>,
    beta_slow: Option<f64>,
}

// ---- validation -------------------------------------------------------------------------

/// Validation context: names the file in every error.
pub(crate) struct Check<'a> {
    pub(crate) file: &'a str,
}

impl Check<'_> {
    pub(crate) fn err(&self, key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            key: key.into(),
            reason: reason.into(),
        }
    }

    fn required<T>(&self, v: Option<T>, key: &str) -> Result<T, ConfigError> {
        v.ok_or_else(|| self.err(key, "missing (required)"))
    }

    /// A required count in `1..=max`.
    fn count(&self, v: Option<u32>, key: &str, max: u32) -> Result<u32, ConfigError> {
        let v = self.required(v, key)?;
        if v == 0 {
            return Err(self.err(key, "must be at least 1, found 0"));
        }
        if v > max {
            return Err(self.err(key, format!("must be at most {max}, found {v}")));
        }
        Ok(v)
    }

    fn even(&self, v: u32, key: &str) -> Result<u32, ConfigError> {
        if v % 2 != 0 {
            return Err(self.err(
                key,
                format!("RoPE dims rotate in pairs, so the count must be even, found {v}"),
            ));
        }
        Ok(v)
    }

    fn dtype(&self, v: Option<String>, key: &str) -> Result<Dtype, ConfigError> {
        let v = self.required(v, key)?;
        const ALL: [Dtype; 5] = [Dtype::F32, Dtype::Bf16, Dtype::F16, Dtype::Fp8, Dtype::Fp4];
        ALL.into_iter().find(|d| d.name() == v).ok_or_else(|| {
            self.err(
                key,
                format!("unknown dtype `{v}` (expected one of f32, bf16, f16, fp8, fp4)"),
            )
        })
    }

    /// A RoPE region is rotated on every shifted read, so its dtype must be rotatable.
    pub(crate) fn rotatable(&self, dtype: Dtype, key: &str) -> Result<(), ConfigError> {
        if !dtype.is_rotatable() {
            return Err(self.err(
                key,
                format!("RoPE dims are rotated on read and {dtype} cannot be rotated (use bf16, f16 or f32)"),
            ));
        }
        Ok(())
    }

    /// A row of `dims` elements of `dtype` must be a whole number of bytes (FP4: even dims).
    pub(crate) fn whole_row(&self, dtype: Dtype, dims: u32, key: &str) -> Result<(), ConfigError> {
        let bits = u64::from(dims) * dtype.bits();
        if bits % 8 != 0 {
            return Err(self.err(
                key,
                format!(
                    "a row of {dims} {dtype} elements is {bits} bits, not a whole number of bytes"
                ),
            ));
        }
        Ok(())
    }

    fn preset(&self, raw: RawPreset) -> Result<ModelGeometry, ConfigError> {
        let model = self.required(raw.model, "model")?;
        let name = self.name(self.required(model.name, "model.name")?)?;
        let kind = match self.required(model.kind, "model.kind")?.as_str() {
            "mla" => ModelKind::Mla,
            "hybrid" => ModelKind::Hybrid,
            "gqa" => ModelKind::Gqa,
            other => {
                return Err(self.err(
                    "model.kind",
                    format!("unknown kind `{other}` (expected one of mla, hybrid, gqa)"),
                ))
            }
        };
        let layers = self.count(model.layers, "model.layers", LAYERS_MAX)?;
        let query_heads = self.count(model.query_heads, "model.query_heads", DIMS_MAX)?;

        let present = [
            ("mla", raw.mla.is_some(), ModelKind::Mla == kind),
            ("hybrid", raw.hybrid.is_some(), ModelKind::Hybrid == kind),
            ("gqa", raw.gqa.is_some(), ModelKind::Gqa == kind),
            ("rope", raw.rope.is_some(), ModelKind::Gqa != kind),
            (
                "compressed_rope",
                raw.compressed_rope.is_some(),
                ModelKind::Hybrid == kind,
            ),
        ];
        for (section, is_present, applies) in present {
            if is_present && !applies {
                return Err(self.err(
                    section,
                    format!("section does not apply to kind `{}`", kind.name()),
                ));
            }
        }
        let precision = self.required(raw.precision, "precision")?;
        let attention = match kind {
            ModelKind::Mla => {
                Attention::Mla(self.mla(self.required(raw.mla, "mla")?, precision, raw.rope)?)
            }
            ModelKind::Hybrid => Attention::Hybrid(self.hybrid(
                self.required(raw.hybrid, "hybrid")?,
                precision,
                raw.rope,
                raw.compressed_rope,
                layers,
            )?),
            ModelKind::Gqa => Attention::Gqa(self.gqa(self.required(raw.gqa, "gqa")?, precision)?),
        };
        let g = ModelGeometry {
            name,
            layers,
            query_heads,
            attention,
        };
        if let Some(found) = model.block_tokens {
            self.block_tokens(&g, found)?;
        }
        Ok(g)
    }

    fn name(&self, name: String) -> Result<String, ConfigError> {
        let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
        if name.is_empty() || name.len() > NAME_LEN_MAX || !name.chars().all(ok_char) {
            return Err(self.err(
                "model.name",
                format!("must be 1 to {NAME_LEN_MAX} characters of a-z, 0-9, '.', '-', '_', found `{name}`"),
            ));
        }
        Ok(name)
    }

    /// A `block_tokens` key may only restate the derived block size.
    fn block_tokens(&self, g: &ModelGeometry, found: u32) -> Result<(), ConfigError> {
        let expected = g.block_tokens();
        if found == expected {
            return Ok(());
        }
        let split = match &g.attention {
            Attention::Hybrid(h)
                if found == 0
                    || found % h.csa_compression != 0
                    || found % h.hca_compression != 0 =>
            {
                format!(
                    "a block of {found} tokens is not a multiple of both compressions (k1 = {}, k2 = {}) and would split a group; ",
                    h.csa_compression, h.hca_compression
                )
            }
            _ => String::new(),
        };
        Err(self.err(
            "model.block_tokens",
            format!("{split}block size is derived from the geometry: expected {expected}, found {found}"),
        ))
    }

    /// Rejects precision keys that belong to another kind.
    fn precision_keys(
        &self,
        p: &RawPrecision,
        kind: ModelKind,
        allowed: &[&str],
    ) -> Result<(), ConfigError> {
        let set = [
            ("c_kv", p.c_kv.is_some()),
            ("k_rope", p.k_rope.is_some()),
            ("rope", p.rope.is_some()),
            ("content", p.content.is_some()),
            ("indexer", p.indexer.is_some()),
            ("kv", p.kv.is_some()),
        ];
        for (key, is_set) in set {
            if is_set && !allowed.contains(&key) {
                return Err(self.err(
                    format!("precision.{key}"),
                    format!(
                        "does not apply to kind `{}` (expected {})",
                        kind.name(),
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    fn mla(
        &self,
        m: RawMla,
        p: RawPrecision,
        rope: Option<RawRope>,
    ) -> Result<MlaGeometry, ConfigError> {
        let kv_lora_rank = self.count(m.kv_lora_rank, "mla.kv_lora_rank", DIMS_MAX)?;
        let rope_dim = self.even(
            self.count(m.rope_dim, "mla.rope_dim", DIMS_MAX)?,
            "mla.rope_dim",
        )?;
        let mha_head_dim = self.count(m.mha_head_dim, "mla.mha_head_dim", DIMS_MAX)?;
        self.precision_keys(&p, ModelKind::Mla, &["c_kv", "k_rope"])?;
        let c_kv = self.dtype(p.c_kv, "precision.c_kv")?;
        let k_rope = self.dtype(p.k_rope, "precision.k_rope")?;
        self.mla_precision(kv_lora_rank, rope_dim, c_kv, k_rope)?;
        let rope = self.rope(self.required(rope, "rope")?, "rope", rope_dim)?;
        Ok(MlaGeometry {
            kv_lora_rank,
            rope_dim,
            c_kv,
            k_rope,
            mha_head_dim,
            rope,
        })
    }

    /// The precision checks of an MLA layer (shared with accounting's precision override).
    pub(crate) fn mla_precision(
        &self,
        kv_lora_rank: u32,
        rope_dim: u32,
        c_kv: Dtype,
        k_rope: Dtype,
    ) -> Result<(), ConfigError> {
        self.whole_row(c_kv, kv_lora_rank, "precision.c_kv")?;
        self.rotatable(k_rope, "precision.k_rope")?;
        self.whole_row(k_rope, rope_dim, "precision.k_rope")
    }

    fn hybrid(
        &self,
        h: RawHybrid,
        p: RawPrecision,
        rope: Option<RawRope>,
        compressed_rope: Option<RawRope>,
        layers: u32,
    ) -> Result<HybridGeometry, ConfigError> {
        let head_dim = self.count(h.head_dim, "hybrid.head_dim", DIMS_MAX)?;
        let rope_dim = self.even(
            self.count(h.rope_dim, "hybrid.rope_dim", DIMS_MAX)?,
            "hybrid.rope_dim",
        )?;
        if rope_dim >= head_dim {
            return Err(self.err(
                "hybrid.rope_dim",
                format!("must be less than hybrid.head_dim ({head_dim}) so that content dims remain, found {rope_dim}"),
            ));
        }
        let indexer_dim = self.count(h.indexer_dim, "hybrid.indexer_dim", DIMS_MAX)?;
        let k1 = self.count(h.csa_compression, "hybrid.csa_compression", TOKENS_MAX)?;
        let k2 = self.count(h.hca_compression, "hybrid.hca_compression", TOKENS_MAX)?;
        if k2 % k1 != 0 {
            return Err(self.err(
                "hybrid.hca_compression",
                format!("must be a multiple of hybrid.csa_compression ({k1}) so that every HCA group is whole CSA groups, found {k2}"),
            ));
        }
        // With k2 a multiple of k1 the block, lcm(k1, k2) = k2, holds whole groups of both.
        let block = lcm(k1, k2);
        debug_assert!(block == k2 && block % k1 == 0 && block % k2 == 0);
        let swa_window = self.count(h.swa_window, "hybrid.swa_window", TOKENS_MAX)?;
        let schemes = self.layer_map(h.layer_map, layers)?;

        self.precision_keys(&p, ModelKind::Hybrid, &["rope", "content", "indexer"])?;
        let rope_dtype = self.dtype(p.rope, "precision.rope")?;
        let content_dtype = self.dtype(p.content, "precision.content")?;
        let indexer_dtype = self.dtype(p.indexer, "precision.indexer")?;
        self.rotatable(rope_dtype, "precision.rope")?;
        self.whole_row(rope_dtype, rope_dim, "precision.rope")?;
        self.whole_row(content_dtype, head_dim - rope_dim, "precision.content")?;
        self.whole_row(indexer_dtype, indexer_dim, "precision.indexer")?;

        let rope = self.rope(self.required(rope, "rope")?, "rope", rope_dim)?;
        let compressed_rope = self.rope(
            self.required(compressed_rope, "compressed_rope")?,
            "compressed_rope",
            rope_dim,
        )?;
        Ok(HybridGeometry {
            head_dim,
            rope_dim,
            indexer_dim,
            csa_compression: k1,
            hca_compression: k2,
            swa_window,
            rope_dtype,
            content_dtype,
            indexer_dtype,
            schemes,
            rope,
            compressed_rope,
        })
    }

    fn layer_map(
        &self,
        runs: Option<Vec<RawRun>>,
        layers: u32,
    ) -> Result<Vec<LayerScheme>, ConfigError> {
        let key = "hybrid.layer_map";
        let runs = self.required(runs, key)?;
        if runs.is_empty() || runs.len() > LAYERS_MAX as usize {
            return Err(self.err(
                key,
                format!("needs 1 to {LAYERS_MAX} runs, found {}", runs.len()),
            ));
        }
        let mut parsed = Vec::with_capacity(runs.len());
        for (i, run) in runs.into_iter().enumerate() {
            let count = self.count(run.count, &format!("{key}[{i}].count"), LAYERS_MAX)?;
            let names = self.required(run.schemes, &format!("{key}[{i}].schemes"))?;
            if names.is_empty() || names.len() > count as usize {
                return Err(self.err(
                    format!("{key}[{i}].schemes"),
                    format!(
                        "needs 1 to `count` ({count}) schemes, found {}",
                        names.len()
                    ),
                ));
            }
            let mut cycle = Vec::with_capacity(names.len());
            for (j, s) in names.iter().enumerate() {
                cycle.push(match s.as_str() {
                    "csa" => LayerScheme::Csa,
                    "hca" => LayerScheme::Hca,
                    "swa" => LayerScheme::Swa,
                    other => {
                        return Err(self.err(
                            format!("{key}[{i}].schemes[{j}]"),
                            format!("unknown scheme `{other}` (expected one of csa, hca, swa)"),
                        ))
                    }
                });
            }
            parsed.push((count, cycle));
        }
        let covered: u64 = parsed.iter().map(|(c, _)| u64::from(*c)).sum();
        if covered != u64::from(layers) {
            return Err(self.err(
                key,
                format!("runs cover {covered} layers, but model.layers is {layers}"),
            ));
        }
        let schemes: Vec<LayerScheme> = parsed
            .iter()
            .flat_map(|(count, cycle)| cycle.iter().copied().cycle().take(*count as usize))
            .collect();
        if schemes.iter().all(|s| *s == LayerScheme::Swa) {
            return Err(self.err(key, "no layer is csa or hca, so a block would hold nothing"));
        }
        Ok(schemes)
    }

    fn gqa(&self, q: RawGqa, p: RawPrecision) -> Result<GqaGeometry, ConfigError> {
        let kv_heads = self.count(q.kv_heads, "gqa.kv_heads", DIMS_MAX)?;
        let head_dim = self.count(q.head_dim, "gqa.head_dim", DIMS_MAX)?;
        self.precision_keys(&p, ModelKind::Gqa, &["kv"])?;
        // The layout multiplies these in u32: bound the product like any other width.
        let width = u64::from(kv_heads) * u64::from(head_dim);
        if width > u64::from(DIMS_MAX) {
            return Err(self.err(
                "gqa.head_dim",
                format!("kv_heads × head_dim must be at most {DIMS_MAX}, found {width}"),
            ));
        }
        let dtype = self.dtype(p.kv, "precision.kv")?;
        self.whole_row(dtype, kv_heads * head_dim, "precision.kv")?;
        Ok(GqaGeometry {
            kv_heads,
            head_dim,
            dtype,
        })
    }

    fn rope(&self, r: RawRope, section: &str, rope_dim: u32) -> Result<RopeSpec, ConfigError> {
        let key = |k: &str| format!("{section}.{k}");
        let convention = match self.required(r.convention, &key("convention"))?.as_str() {
            "interleaved" => RopeConvention::Interleaved,
            "half_split" => RopeConvention::HalfSplit,
            other => {
                return Err(self.err(
                    key("convention"),
                    format!("unknown convention `{other}` (expected interleaved or half_split)"),
                ))
            }
        };
        let theta = self.required(r.theta, &key("theta"))?;
        if !(theta.is_finite() && theta > 1.0) {
            return Err(self.err(
                key("theta"),
                format!("must be a finite number greater than 1, found {theta}"),
            ));
        }
        let scaling = match (r.yarn, r.factors) {
            (Some(_), Some(_)) => {
                return Err(self.err(
                    key("factors"),
                    format!(
                    "a RoPE has one scaling: give {section}.yarn or {section}.factors, not both"
                ),
                ))
            }
            (None, None) => RopeScaling::None,
            (None, Some(factors)) => {
                let expected = (rope_dim / 2) as usize;
                if factors.len() != expected {
                    return Err(self.err(
                        key("factors"),
                        format!("expected {expected} factors (one per pair: rope_dim {rope_dim} / 2), found {}", factors.len()),
                    ));
                }
                if let Some((i, f)) = factors
                    .iter()
                    .enumerate()
                    .find(|(_, f)| !(f.is_finite() && **f > 0.0))
                {
                    return Err(self.err(
                        format!("{section}.factors[{i}]"),
                        format!("must be a finite number greater than 0, found {f}"),
                    ));
                }
                RopeScaling::Factors(factors)
            }
            (Some(y), None) => self.yarn(y, &key("yarn"))?,
        };
        Ok(RopeSpec {
            convention,
            theta,
            scaling,
        })
    }

    fn yarn(&self, y: RawYarn, section: &str) -> Result<RopeScaling, ConfigError> {
        let positive = |v: Option<f64>, k: &str| -> Result<f64, ConfigError> {
            let key = format!("{section}.{k}");
            let v = self.required(v, &key)?;
            if !(v.is_finite() && v > 0.0) {
                return Err(self.err(
                    key,
                    format!("must be a finite number greater than 0, found {v}"),
                ));
            }
            Ok(v)
        };
        let factor = positive(y.factor, "factor")?;
        let key = format!("{section}.original_max_position");
        let original_max_position = self.required(y.original_max_position, &key)?;
        if original_max_position == 0 || original_max_position > POSITION_MAX {
            return Err(self.err(
                key,
                format!("must be in 1..={POSITION_MAX}, found {original_max_position}"),
            ));
        }
        let beta_fast = positive(y.beta_fast, "beta_fast")?;
        let beta_slow = positive(y.beta_slow, "beta_slow")?;
        if beta_fast < beta_slow {
            return Err(self.err(
                format!("{section}.beta_fast"),
                format!("must be at least beta_slow ({beta_slow}), found {beta_fast}"),
            ));
        }
        Ok(RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
        })
    }
}

// ---- TOML errors ------------------------------------------------------------------------

/// Maps a TOML syntax or serde error to the dotted key at its position.
fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim().replace('\n', "; ");
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line = text[..start].matches('\n').count() + 1;
            ConfigError {
                file: file.to_owned(),
                key: key_at(text, start),
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
