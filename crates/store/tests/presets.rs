//! The model presets: every embedded preset parses, block sizes are derived, and each class of
//! mistake a user can make in a preset is rejected naming the file, the dotted key and why.

use std::path::Path;

use kvfabric_store::geometry::accounting::with_mla_precision;
use kvfabric_store::geometry::preset::{
    builtin_preset, builtin_presets, load_dir, lookup, BUILTIN_PRESET_FILES,
};
use kvfabric_store::geometry::{Attention, LayerScheme, MLA_BLOCK_TOKENS};
use kvfabric_store::rope::{RopeConvention, RopeScaling, Yarn};
use kvfabric_store::{ConfigError, Dtype, ModelGeometry, ModelKind, StoreError};

const V3: &str = include_str!("../../../configs/models/deepseek-v3.toml");
const V4: &str = include_str!("../../../configs/models/deepseek-v4-pro.toml");
const LLAMA: &str = include_str!("../../../configs/models/llama-3.1-8b.toml");
const MINICPM: &str = include_str!("../../../configs/models/minicpm3-4b.toml");

fn models_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/models"))
}

/// `base` with `from` replaced by `to` (which must occur exactly once).
fn edit(base: &str, from: &str, to: &str) -> String {
    assert_eq!(
        base.matches(from).count(),
        1,
        "`{from}` must occur once in the base preset"
    );
    base.replacen(from, to, 1)
}

/// Parses `text` as `bad.toml`, expecting a rejection at `key` whose reason contains `reason`.
#[track_caller]
fn rejects(text: &str, key: &str, reason: &str) -> ConfigError {
    let e = ModelGeometry::from_toml("bad.toml", text).expect_err("preset must be rejected");
    assert_eq!(e.file, "bad.toml", "{e}");
    assert_eq!(e.key, key, "{e}");
    assert!(
        e.reason.contains(reason),
        "reason `{}` lacks `{reason}`",
        e.reason
    );
    e
}

#[test]
fn every_embedded_preset_parses() {
    let presets = builtin_presets();
    assert_eq!(presets.len(), BUILTIN_PRESET_FILES.len());
    let mut names: Vec<&str> = presets.iter().map(|g| g.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "deepseek-67b",
            "deepseek-v2",
            "deepseek-v2-lite",
            "deepseek-v3",
            "deepseek-v4-flash",
            "deepseek-v4-pro",
            "gemma-3-27b",
            "kimi-k2",
            "llama-3.1-8b",
            "minicpm3-4b",
            "mistral-7b",
            "qwen3-8b",
        ]
    );
    let mut fingerprints: Vec<[u8; 16]> = presets.iter().map(|g| g.fingerprint()).collect();
    fingerprints.sort_unstable();
    fingerprints.dedup();
    assert_eq!(
        fingerprints.len(),
        presets.len(),
        "every preset has its own fingerprint"
    );
    for (file, _) in BUILTIN_PRESET_FILES {
        let stem = file.strip_suffix(".toml").unwrap();
        assert!(
            presets.iter().any(|g| g.name == stem),
            "{file}: name matches the file"
        );
    }
}

#[test]
fn every_file_in_configs_models_is_embedded_and_identical() {
    let from_disk = load_dir(models_dir()).expect("configs/models loads");
    assert_eq!(
        from_disk,
        builtin_presets(),
        "a config file is missing from BUILTIN_PRESET_FILES"
    );
    for (file, text) in BUILTIN_PRESET_FILES {
        let on_disk = std::fs::read_to_string(models_dir().join(file)).unwrap();
        assert_eq!(&on_disk, text, "{file}");
    }
}

#[test]
fn block_tokens_are_derived_from_the_geometry() {
    for g in builtin_presets() {
        let expected = match g.kind() {
            ModelKind::Mla => 64,
            ModelKind::Hybrid => 128,
            ModelKind::Gqa => 16,
        };
        assert_eq!(g.block_tokens(), expected, "{}", g.name);
        assert_eq!(g.block_layout().block_tokens, expected, "{}", g.name);
    }
    assert_eq!(MLA_BLOCK_TOKENS, 64);
    // Restating the derived size is allowed.
    let g = ModelGeometry::from_toml(
        "ok.toml",
        &edit(
            V3,
            "query_heads = 128\n",
            "query_heads = 128\nblock_tokens = 64\n",
        ),
    )
    .unwrap();
    assert_eq!(g, builtin_preset("deepseek-v3").unwrap());
}

#[test]
fn rope_of_the_presets() {
    let rope = |name: &str| match builtin_preset(name).unwrap().attention {
        Attention::Mla(m) => m.rope,
        _ => panic!("{name} is not mla"),
    };
    let yarn = |factor, beta_fast, mscale| Yarn {
        factor,
        original_max_position: 4096,
        beta_fast,
        beta_slow: 1.0,
        mscale: Some(mscale),
        mscale_all_dim: Some(mscale),
        attention_factor: None,
    };
    for (name, mscale) in [
        ("deepseek-v2-lite", 0.707),
        ("deepseek-v2", 0.707),
        ("deepseek-v3", 1.0),
    ] {
        let r = rope(name);
        assert_eq!(
            (r.convention, r.theta),
            (RopeConvention::Interleaved, 10000.0),
            "{name}"
        );
        assert_eq!(
            r.scaling,
            RopeScaling::Yarn(yarn(40.0, 32.0, mscale)),
            "{name}"
        );
        assert_eq!(r.attention_factor(), 1.0, "{name}: mscale / mscale_all_dim");
    }
    let k2 = rope("kimi-k2");
    assert_eq!(
        (k2.convention, k2.theta, k2.scaling),
        (
            RopeConvention::Interleaved,
            50000.0,
            RopeScaling::Yarn(yarn(32.0, 1.0, 1.0))
        )
    );
    let mini = rope("minicpm3-4b");
    assert_eq!(
        (mini.convention, mini.theta),
        (RopeConvention::HalfSplit, 10000.0)
    );
    let RopeScaling::LongRope(l) = &mini.scaling else {
        panic!("minicpm3 is LongRoPE")
    };
    assert_eq!((l.original_max_position, l.max_position), (32768, 32768));
    assert_eq!(
        (l.short_factors.len(), l.short_factors[0]),
        (16, 1.0591234137867171)
    );
    assert_eq!(l.long_factors, l.short_factors, "equal in the checkpoint");
    assert_eq!(mini.attention_factor(), 1.0);
    for name in ["deepseek-v4-pro", "deepseek-v4-flash"] {
        let Attention::Hybrid(h) = builtin_preset(name).unwrap().attention else {
            panic!()
        };
        assert_eq!((h.rope.theta, h.compressed_rope.theta), (10000.0, 160000.0));
        assert_eq!(h.rope.scaling, RopeScaling::None);
        assert_eq!(
            h.compressed_rope.scaling,
            RopeScaling::Yarn(Yarn {
                factor: 16.0,
                original_max_position: 65536,
                beta_fast: 32.0,
                beta_slow: 1.0,
                mscale: None,
                mscale_all_dim: None,
                attention_factor: Some(1.0),
            })
        );
        assert_eq!(h.compressed_rope.attention_factor(), 1.0, "{name}");
        assert_eq!(h.compressed_rope.convention, RopeConvention::Interleaved);
        assert_eq!(
            (h.rope_dtype, h.content_dtype, h.indexer_dtype),
            (Dtype::Bf16, Dtype::Fp8, Dtype::Fp4)
        );
        assert_eq!(
            (
                h.head_dim,
                h.rope_dim,
                h.content_dim(),
                h.indexer_dim,
                h.indexer_rope_dim
            ),
            (512, 64, 448, 128, 64)
        );
    }
}

#[test]
fn yarn_attention_factor_follows_the_models_rule() {
    let parse = |extra: &str| {
        ModelGeometry::from_toml(
            "af.toml",
            &edit(V3, "mscale = 1.0\nmscale_all_dim = 1.0\n", extra),
        )
        .unwrap()
    };
    let factor = |extra: &str| match parse(extra).attention {
        Attention::Mla(m) => m.rope.attention_factor(),
        _ => unreachable!(),
    };
    // Neither mscale: transformers' default, 0.1 ln(factor) + 1.
    assert_eq!(factor(""), 0.1 * 40f64.ln() + 1.0);
    // Both: their ratio.
    let ratio = (0.1 * 0.8 * 40f64.ln() + 1.0) / (0.1 * 0.5 * 40f64.ln() + 1.0);
    assert_eq!(factor("mscale = 0.8\nmscale_all_dim = 0.5\n"), ratio);
    // An explicit factor wins.
    assert_eq!(factor("attention_factor = 1.25\n"), 1.25);
    // A factor that is not 1 is part of the fingerprint; 1 adds nothing.
    let v3 = builtin_preset("deepseek-v3").unwrap().fingerprint();
    assert_eq!(parse("attention_factor = 1.0\n").fingerprint(), v3);
    assert_ne!(parse("attention_factor = 1.25\n").fingerprint(), v3);
}

#[test]
fn explicit_factors_are_replaced_by_longrope() {
    let text = edit(
        MINICPM,
        "theta = 10000.0\n",
        &format!("theta = 10000.0\nfactors = [{}]\n", ["1.0"; 16].join(", ")),
    );
    rejects(&text, "rope.factors", "replaced by [rope.longrope]");
}

#[test]
fn lookup_by_name() {
    let presets = builtin_presets();
    assert_eq!(lookup(&presets, "kimi-k2").unwrap().layers, 61);
    match lookup(&presets, "gpt-9") {
        Err(StoreError::UnknownModel { name, known }) => {
            assert_eq!(name, "gpt-9");
            assert!(known.contains("deepseek-v3"), "{known}");
        }
        other => panic!("{other:?}"),
    }
    assert!(builtin_preset("deepseek-v4-pro").is_some());
    assert!(builtin_preset("DeepSeek-V3").is_none(), "names are exact");
}

#[test]
fn load_dir_names_the_file_and_rejects_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), V3).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
    assert_eq!(load_dir(dir.path()).unwrap().len(), 1);

    std::fs::write(dir.path().join("b.toml"), V3).unwrap();
    match load_dir(dir.path()) {
        Err(StoreError::Config(e)) => {
            assert!(e.file.ends_with("b.toml"), "{e}");
            assert_eq!(e.key, "model.name");
            assert!(
                e.reason.contains("already defined in") && e.reason.contains("a.toml"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }

    std::fs::write(
        dir.path().join("b.toml"),
        edit(V3, "layers = 61", "layers = 0"),
    )
    .unwrap();
    match load_dir(dir.path()) {
        Err(StoreError::Config(e)) => {
            assert!(e.file.ends_with("b.toml"), "{e}");
            assert_eq!(e.key, "model.layers");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        load_dir(&dir.path().join("missing")),
        Err(StoreError::Io { .. })
    ));
}

#[test]
fn error_display_is_file_key_reason() {
    let e = rejects(
        &edit(V3, "kind = \"mla\"", "kind = \"mha\""),
        "model.kind",
        "unknown kind `mha`",
    );
    assert_eq!(
        e.to_string(),
        "bad.toml: key `model.kind`: unknown kind `mha` (expected one of mla, hybrid, gqa)"
    );
}

// ---- one test per class of mistake ------------------------------------------------------

#[test]
fn rejects_unknown_kind() {
    rejects(
        &edit(V4, "kind = \"hybrid\"", "kind = \"v4\""),
        "model.kind",
        "unknown kind `v4`",
    );
}

#[test]
fn rejects_unknown_dtype() {
    rejects(
        &edit(V3, "c_kv = \"bf16\"", "c_kv = \"int8\""),
        "precision.c_kv",
        "unknown dtype `int8`",
    );
    rejects(
        &edit(V4, "content = \"fp8\"", "content = \"e4m3\""),
        "precision.content",
        "unknown dtype `e4m3`",
    );
    rejects(
        &edit(LLAMA, "kv = \"bf16\"", "kv = \"fp16\""),
        "precision.kv",
        "unknown dtype `fp16`",
    );
}

#[test]
fn rejects_unknown_convention() {
    rejects(
        &edit(V3, "convention = \"interleaved\"", "convention = \"neox\""),
        "rope.convention",
        "unknown convention `neox`",
    );
    let compressed = edit(
        V4,
        "convention = \"interleaved\"\ntheta = 160000.0",
        "convention = \"adjacent\"\ntheta = 160000.0",
    );
    rejects(
        &compressed,
        "compressed_rope.convention",
        "unknown convention `adjacent`",
    );
}

#[test]
fn rejects_unknown_scheme() {
    rejects(
        &edit(
            V4,
            "schemes = [\"csa\", \"hca\"]",
            "schemes = [\"csa\", \"mla\"]",
        ),
        "hybrid.layer_map[1].schemes[1]",
        "unknown scheme `mla`",
    );
}

#[test]
fn rejects_unknown_keys_and_sections() {
    rejects(
        &edit(V3, "rope_dim = 64", "rope_dims = 64"),
        "mla.rope_dims",
        "unknown field `rope_dims`",
    );
    rejects(&edit(V3, "[mla]", "[mla_]"), "mla_", "unknown field `mla_`");
    rejects(
        &edit(V4, "count = 59", "cont = 59"),
        "hybrid.layer_map[1].cont",
        "unknown field `cont`",
    );
    rejects(
        &edit(V3, "beta_slow = 1.0", "beta_slow = 1.0\nmscale_all = 1.0"),
        "rope.yarn.mscale_all",
        "unknown field `mscale_all`",
    );
}

#[test]
fn rejects_sections_and_precision_of_another_kind() {
    rejects(
        &format!("{V3}\n[gqa]\nkv_heads = 8\nhead_dim = 128\n"),
        "gqa",
        "does not apply to kind `mla`",
    );
    rejects(
        &format!("{LLAMA}\n[rope]\nconvention = \"half_split\"\ntheta = 500000.0\n"),
        "rope",
        "does not apply to kind `gqa`",
    );
    rejects(
        &edit(
            V3,
            "k_rope = \"bf16\"",
            "k_rope = \"bf16\"\ncontent = \"fp8\"",
        ),
        "precision.content",
        "does not apply to kind `mla`",
    );
}

#[test]
fn rejects_missing_keys() {
    rejects(
        &edit(V3, "mha_head_dim = 128\n", ""),
        "mla.mha_head_dim",
        "missing",
    );
    rejects(
        &edit(V4, "swa_window = 128\n", ""),
        "hybrid.swa_window",
        "missing",
    );
    rejects(
        &edit(V4, "indexer = \"fp4\"\n", ""),
        "precision.indexer",
        "missing",
    );
    let no_compressed = &V4[..V4.find("# Every row of a CSA or HCA layer.").unwrap()];
    rejects(no_compressed, "compressed_rope", "missing");
}

#[test]
fn rejects_wrong_types_and_syntax() {
    rejects(
        &edit(V3, "layers = 61", "layers = \"61\""),
        "model.layers",
        "invalid type",
    );
    rejects(
        &edit(V3, "layers = 61", "layers = -61"),
        "model.layers",
        "expected u32",
    );
    let line = V3.lines().position(|l| l.starts_with("name = ")).unwrap() + 1;
    let e = rejects(
        &edit(V3, "name = \"deepseek-v3\"", "name = \"deepseek-v3"),
        "model.name",
        "invalid",
    );
    assert!(e.reason.ends_with(&format!("(line {line})")), "{e}");
}

#[test]
fn rejects_zero_dims() {
    rejects(
        &edit(V3, "layers = 61", "layers = 0"),
        "model.layers",
        "must be at least 1, found 0",
    );
    rejects(
        &edit(V3, "query_heads = 128", "query_heads = 0"),
        "model.query_heads",
        "at least 1",
    );
    rejects(
        &edit(V3, "kv_lora_rank = 512", "kv_lora_rank = 0"),
        "mla.kv_lora_rank",
        "at least 1",
    );
    rejects(
        &edit(V3, "rope_dim = 64", "rope_dim = 0"),
        "mla.rope_dim",
        "at least 1",
    );
    rejects(
        &edit(V4, "head_dim = 512", "head_dim = 0"),
        "hybrid.head_dim",
        "at least 1",
    );
    rejects(
        &edit(V4, "indexer_dim = 128", "indexer_dim = 0"),
        "hybrid.indexer_dim",
        "at least 1",
    );
    rejects(
        &edit(V4, "csa_compression = 4", "csa_compression = 0"),
        "hybrid.csa_compression",
        "at least 1",
    );
    rejects(
        &edit(V4, "swa_window = 128", "swa_window = 0"),
        "hybrid.swa_window",
        "at least 1",
    );
    rejects(
        &edit(V4, "count = 2 ", "count = 0 "),
        "hybrid.layer_map[0].count",
        "at least 1",
    );
    rejects(
        &edit(LLAMA, "kv_heads = 8", "kv_heads = 0"),
        "gqa.kv_heads",
        "at least 1",
    );
    rejects(
        &edit(LLAMA, "kv_heads = 8", "kv_heads = 1024"),
        "gqa.head_dim",
        "kv_heads × head_dim must be at most 65536, found 131072",
    );
    rejects(
        &edit(V3, "layers = 61", "layers = 5000"),
        "model.layers",
        "at most 1024",
    );
}

#[test]
fn rejects_odd_rope_dims() {
    rejects(
        &edit(V3, "rope_dim = 64", "rope_dim = 63"),
        "mla.rope_dim",
        "must be even, found 63",
    );
    rejects(
        &edit(V4, "\nrope_dim = 64", "\nrope_dim = 65"),
        "hybrid.rope_dim",
        "must be even, found 65",
    );
}

#[test]
fn rejects_rope_dims_that_leave_no_content() {
    rejects(
        &edit(V4, "\nrope_dim = 64", "\nrope_dim = 512"),
        "hybrid.rope_dim",
        "must be less than hybrid.head_dim (512)",
    );
}

#[test]
fn rejects_fp4_rows_that_are_not_whole_bytes() {
    rejects(
        &edit(V4, "indexer_dim = 128", "indexer_dim = 127"),
        "precision.indexer",
        "127 fp4 elements is 508 bits",
    );
    rejects(
        &edit(V4, "content = \"fp8\"", "content = \"fp4\"")
            .replace("head_dim = 512", "head_dim = 513"),
        "precision.content",
        "449 fp4 elements",
    );
    // Even FP4 rows are fine.
    let g = ModelGeometry::from_toml("ok.toml", &edit(V3, "c_kv = \"bf16\"", "c_kv = \"fp4\""))
        .unwrap();
    assert_eq!(g.block_layout().payload_len, 61 * 64 * (256 + 128));
}

#[test]
fn rejects_a_scheme_map_not_summing_to_layers() {
    rejects(
        &edit(V4, "count = 59", "count = 58"),
        "hybrid.layer_map",
        "runs cover 60 layers, but model.layers is 61",
    );
    rejects(
        &edit(V4, "count = 59", "count = 60"),
        "hybrid.layer_map",
        "runs cover 62 layers",
    );
    rejects(
        &edit(V4, "schemes = [\"csa\", \"hca\"]", "schemes = []"),
        "hybrid.layer_map[1].schemes",
        "needs 1 to",
    );
    let all_swa = edit(V4, "schemes = [\"csa\", \"hca\"]", "schemes = [\"swa\"]")
        .replace("schemes = [\"hca\"]", "schemes = [\"swa\"]");
    rejects(&all_swa, "hybrid.layer_map", "no layer is csa or hca");
}

#[test]
fn rejects_block_tokens_that_differ_from_the_derived_size() {
    let e = rejects(
        &edit(
            V3,
            "query_heads = 128\n",
            "query_heads = 128\nblock_tokens = 16\n",
        ),
        "model.block_tokens",
        "block size is derived from the geometry: expected 64, found 16",
    );
    assert!(!e.reason.contains("split"), "{e}");
    rejects(
        &edit(
            V4,
            "query_heads = 128\n",
            "query_heads = 128\nblock_tokens = 256\n",
        ),
        "model.block_tokens",
        "block size is derived from the geometry: expected 128, found 256",
    );
}

#[test]
fn rejects_a_block_that_is_not_a_multiple_of_the_compressions() {
    rejects(
        &edit(
            V4,
            "query_heads = 128\n",
            "query_heads = 128\nblock_tokens = 100\n",
        ),
        "model.block_tokens",
        "a block of 100 tokens is not a multiple of both compressions (k1 = 4, k2 = 128)",
    );
}

#[test]
fn rejects_k2_not_a_multiple_of_k1() {
    rejects(
        &edit(V4, "hca_compression = 128", "hca_compression = 130"),
        "hybrid.hca_compression",
        "must be a multiple of hybrid.csa_compression (4)",
    );
}

#[test]
fn rejects_rope_dtypes_that_cannot_rotate() {
    rejects(
        &edit(V3, "k_rope = \"bf16\"", "k_rope = \"fp8\""),
        "precision.k_rope",
        "fp8 cannot be rotated",
    );
    rejects(
        &edit(V4, "rope = \"bf16\"", "rope = \"fp4\""),
        "precision.rope",
        "fp4 cannot be rotated",
    );
    // The accounting override is held to the same rule.
    let e = with_mla_precision(
        &builtin_preset("deepseek-v3").unwrap(),
        Dtype::Fp8,
        Dtype::Fp8,
    )
    .unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.key.as_str()),
        ("<override>/deepseek-v3", "precision.k_rope")
    );
    let e = with_mla_precision(
        &builtin_preset("deepseek-v4-pro").unwrap(),
        Dtype::Fp8,
        Dtype::Bf16,
    )
    .unwrap_err();
    assert_eq!(e.key, "model.kind");
}

#[test]
fn rejects_yarn_factor_not_positive() {
    rejects(
        &edit(V3, "factor = 40.0", "factor = 0.0"),
        "rope.yarn.factor",
        "greater than 0, found 0",
    );
    rejects(
        &edit(V3, "factor = 40.0", "factor = -2.0"),
        "rope.yarn.factor",
        "found -2",
    );
    rejects(
        &edit(V3, "factor = 40.0", "factor = nan"),
        "rope.yarn.factor",
        "found NaN",
    );
    rejects(
        &edit(
            V3,
            "original_max_position = 4096",
            "original_max_position = 0",
        ),
        "rope.yarn.original_max_position",
        "found 0",
    );
    rejects(
        &edit(V3, "beta_fast = 32.0", "beta_fast = 0.5"),
        "rope.yarn.beta_fast",
        "at least beta_slow (1)",
    );
}

#[test]
fn rejects_bad_theta() {
    rejects(
        &edit(V3, "theta = 10000.0", "theta = 0.0"),
        "rope.theta",
        "greater than 1, found 0",
    );
    rejects(
        &edit(V3, "theta = 10000.0", "theta = inf"),
        "rope.theta",
        "found inf",
    );
}

#[test]
fn rejects_longrope_factors_of_the_wrong_length() {
    let ten = ["1.0"; 10].join(", ");
    let short = |with: &str| {
        let start = MINICPM.find("short_factors = [").unwrap();
        let end = start + MINICPM[start..].find("]\n").unwrap() + 2;
        format!(
            "{}short_factors = [{with}]\n{}",
            &MINICPM[..start],
            &MINICPM[end..]
        )
    };
    rejects(
        &short(&ten),
        "rope.longrope.short_factors",
        "expected 16 factors (one per pair: rope_dim 32 / 2), found 10",
    );
    let mut sixteen = vec!["1.0"; 16];
    sixteen[3] = "0.0";
    rejects(
        &short(&sixteen.join(", ")),
        "rope.longrope.short_factors[3]",
        "greater than 0",
    );
    rejects(
        &edit(MINICPM, "\nmax_position = 32768\n", "\n"),
        "rope.longrope.max_position",
        "missing",
    );
    rejects(
        &edit(
            MINICPM,
            "original_max_position = 32768",
            "original_max_position = 0",
        ),
        "rope.longrope.original_max_position",
        "found 0",
    );
    // One scaling per RoPE.
    let both = edit(
        MINICPM,
        "[rope.longrope]\n",
        "[rope.yarn]\nfactor = 2.0\noriginal_max_position = 4096\nbeta_fast = 32.0\n\
         beta_slow = 1.0\n\n[rope.longrope]\n",
    );
    rejects(&both, "rope.longrope", "not both");
}

#[test]
fn rejects_half_an_mscale_pair_and_bad_attention_factors() {
    rejects(
        &edit(V3, "mscale_all_dim = 1.0\n", ""),
        "rope.yarn.mscale_all_dim",
        "give mscale and mscale_all_dim together",
    );
    rejects(
        &edit(V3, "mscale = 1.0\n", ""),
        "rope.yarn.mscale",
        "together",
    );
    rejects(
        &edit(V3, "mscale = 1.0\n", "mscale = 0.0\n"),
        "rope.yarn.mscale",
        "greater than 0, found 0",
    );
    rejects(
        &edit(
            V3,
            "mscale = 1.0\n",
            "mscale = 1.0\nattention_factor = -1.0\n",
        ),
        "rope.yarn.attention_factor",
        "found -1",
    );
}

#[test]
fn rejects_indexer_rope_dims_that_do_not_fit() {
    rejects(
        &edit(V4, "indexer_rope_dim = 64", "indexer_rope_dim = 65"),
        "hybrid.indexer_rope_dim",
        "must be even, found 65",
    );
    rejects(
        &edit(V4, "indexer_rope_dim = 64", "indexer_rope_dim = 130"),
        "hybrid.indexer_rope_dim",
        "at most hybrid.indexer_dim (128), found 130",
    );
    rejects(
        &edit(V4, "indexer_rope_dim = 64\n", ""),
        "hybrid.indexer_rope_dim",
        "missing",
    );
}

#[test]
fn rejects_bad_names() {
    rejects(
        &edit(V3, "name = \"deepseek-v3\"", "name = \"DeepSeek V3\""),
        "model.name",
        "a-z, 0-9",
    );
    rejects(
        &edit(V3, "name = \"deepseek-v3\"", "name = \"\""),
        "model.name",
        "found ``",
    );
}

#[test]
fn layer_map_runs_cycle_their_schemes() {
    let text = edit(
        V4,
        "count = 2           # layers 0-1\nschemes = [\"hca\"]",
        "count = 3\nschemes = [\"swa\", \"hca\", \"csa\"]",
    )
    .replace("count = 59", "count = 58");
    let g = ModelGeometry::from_toml("cycle.toml", &text).unwrap();
    let Attention::Hybrid(h) = g.attention else {
        panic!()
    };
    assert_eq!(
        &h.schemes[..5],
        [
            LayerScheme::Swa,
            LayerScheme::Hca,
            LayerScheme::Csa,
            LayerScheme::Csa,
            LayerScheme::Hca
        ]
    );
    assert_eq!(h.schemes.len(), 61);
}
