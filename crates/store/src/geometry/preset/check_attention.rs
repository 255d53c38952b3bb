//! Checks of the attention sections: `[mla]`, `[hybrid]` with its layer map, `[gqa]`, and the
//! per-region `[precision]` of each.

use super::check::Check;
use super::schema::*;
use super::{DIMS_MAX, LAYERS_MAX, TOKENS_MAX};
use crate::dtype::Dtype;
use crate::error::ConfigError;
use crate::geometry::{lcm, GqaGeometry, HybridGeometry, LayerScheme, MlaGeometry, ModelKind};

impl Check<'_> {
    pub(super) fn mla(
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

    pub(super) fn hybrid(
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
        let indexer_rope_dim = self.even(
            self.required(h.indexer_rope_dim, "hybrid.indexer_rope_dim")?,
            "hybrid.indexer_rope_dim",
        )?;
        if indexer_rope_dim > indexer_dim {
            return Err(self.err(
                "hybrid.indexer_rope_dim",
                format!(
                    "must be at most hybrid.indexer_dim ({indexer_dim}), found {indexer_rope_dim}"
                ),
            ));
        }
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
        debug_assert!(block == k2 && block.is_multiple_of(k1) && block.is_multiple_of(k2));
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
            indexer_rope_dim,
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

    pub(super) fn layer_map(
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

    pub(super) fn gqa(&self, q: RawGqa, p: RawPrecision) -> Result<GqaGeometry, ConfigError> {
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
}
