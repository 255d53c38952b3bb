//! Validation context and the checks shared by every section: required keys, counts, dtypes,
//! names, derived block size; the whole preset assembled from its sections.

use super::schema::*;
use super::{DIMS_MAX, LAYERS_MAX, NAME_LEN_MAX};
use crate::dtype::Dtype;
use crate::error::ConfigError;
use crate::geometry::{Attention, ModelGeometry, ModelKind};

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

    pub(super) fn required<T>(&self, v: Option<T>, key: &str) -> Result<T, ConfigError> {
        v.ok_or_else(|| self.err(key, "missing (required)"))
    }

    /// A required count in `1..=max`.
    pub(super) fn count(&self, v: Option<u32>, key: &str, max: u32) -> Result<u32, ConfigError> {
        let v = self.required(v, key)?;
        if v == 0 {
            return Err(self.err(key, "must be at least 1, found 0"));
        }
        if v > max {
            return Err(self.err(key, format!("must be at most {max}, found {v}")));
        }
        Ok(v)
    }

    pub(super) fn even(&self, v: u32, key: &str) -> Result<u32, ConfigError> {
        if !v.is_multiple_of(2) {
            return Err(self.err(
                key,
                format!("RoPE dims rotate in pairs, so the count must be even, found {v}"),
            ));
        }
        Ok(v)
    }

    pub(super) fn dtype(&self, v: Option<String>, key: &str) -> Result<Dtype, ConfigError> {
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
        if !bits.is_multiple_of(8) {
            return Err(self.err(
                key,
                format!(
                    "a row of {dims} {dtype} elements is {bits} bits, not a whole number of bytes"
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn preset(&self, raw: RawPreset) -> Result<ModelGeometry, ConfigError> {
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

    pub(super) fn name(&self, name: String) -> Result<String, ConfigError> {
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
    pub(super) fn block_tokens(&self, g: &ModelGeometry, found: u32) -> Result<(), ConfigError> {
        let expected = g.block_tokens();
        if found == expected {
            return Ok(());
        }
        let split = match &g.attention {
            Attention::Hybrid(h)
                if found == 0
                    || !found.is_multiple_of(h.csa_compression)
                    || !found.is_multiple_of(h.hca_compression) =>
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
    pub(super) fn precision_keys(
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
}
