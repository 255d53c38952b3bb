//! Unit tests of the per-request arena and its table.

use super::*;
use crate::geometry::preset::builtin_preset;

fn v4() -> ModelGeometry {
    builtin_preset("deepseek-v4-pro").expect("built-in")
}

/// V4-Flash: its layers 0 and 1 are sliding-window only (V4-Pro has no such layer).
fn v4_flash() -> ModelGeometry {
    builtin_preset("deepseek-v4-flash").expect("built-in")
}

/// A row whose every byte is the token index's low byte, tagged with the layer.
fn row(arena: &RequestArena, token: u32, layer: u32) -> Vec<u8> {
    let mut r = vec![token as u8; arena.row_bytes()];
    r[0] = layer as u8;
    r
}

#[test]
fn v4_pro_arena_is_6_852_096_bytes() {
    let g = v4();
    let Attention::Hybrid(h) = &g.attention else {
        unreachable!()
    };
    let arena = RequestArena::new(&g).unwrap();
    assert_eq!(arena.row_bytes(), 576);
    assert_eq!(row_bytes(h), ByteCount(576));
    assert_eq!(arena.layers(), 61);
    assert_eq!(arena.window_rows(), 128);
    assert_eq!(arena.bytes(), ByteCount(6_852_096));
    assert_eq!(capacity_bytes(h), arena.bytes());
    assert_eq!(RequestArena::size_for(&g).unwrap(), arena.bytes());
    // The formula, spelled out.
    let (csa, hca) = (30u64, 31u64);
    assert_eq!(576 * (61 * 128 + csa * 4 + hca * 128), 6_852_096);
    assert_eq!(61 * 128 * 576, 4_497_408);
    assert_eq!(576 * (30 * 4), 69_120);
    assert_eq!(576 * (31 * 128), 2_285_568);
}

#[test]
fn v4_flash_arena_is_4_693_248_bytes() {
    let arena = RequestArena::new(&v4_flash()).unwrap();
    assert_eq!(arena.layers(), 43);
    let (swa, csa, hca) = (2u64, 21u64, 20u64);
    assert_eq!(swa + csa + hca, 43);
    assert_eq!(576 * (43 * 128 + csa * 4 + hca * 128), 4_693_248);
    assert_eq!(arena.bytes(), ByteCount(4_693_248));
}

#[test]
fn mla_and_gqa_have_no_arena() {
    for name in ["deepseek-v3", "llama-3.1-8b"] {
        let g = builtin_preset(name).unwrap();
        match RequestArena::new(&g) {
            Err(ArenaError::NotHybrid { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn window_keeps_the_last_rows_in_order_and_never_grows() {
    let mut arena = RequestArena::new(&v4_flash()).unwrap();
    let bytes = arena.bytes();
    assert_eq!(arena.scheme(0).unwrap(), LayerScheme::Swa);
    assert!(arena.window(0).unwrap().is_empty());
    for t in 0..300u32 {
        assert_eq!(
            arena.append(0, &row(&arena, t, 0)).unwrap(),
            Appended::WindowOnly
        );
        let w = arena.window(0).unwrap();
        assert_eq!(w.len(), (t as usize + 1).min(128));
    }
    let w = arena.window(0).unwrap();
    let firsts: Vec<u8> = w.rows().map(|r| r[1]).collect();
    let expected: Vec<u8> = (172..300u32).map(|t| t as u8).collect();
    assert_eq!(firsts, expected);
    assert!(w.rows().all(|r| r[0] == 0));
    let (older, newer) = w.as_slices();
    assert_eq!(older.len() + newer.len(), 128 * 576);
    assert_eq!(arena.appended(0).unwrap(), 300);
    assert_eq!(arena.bytes(), bytes);
    // Layer 1's window is untouched by layer 0's rows.
    assert!(arena.window(1).unwrap().is_empty());
}

#[test]
fn csa_groups_complete_every_k1_rows_and_must_be_drained() {
    let mut arena = RequestArena::new(&v4()).unwrap();
    let layer = 2;
    assert_eq!(arena.scheme(layer).unwrap(), LayerScheme::Csa);
    for t in 0..3u32 {
        let r = row(&arena, t, layer);
        assert_eq!(
            arena.append(layer, &r).unwrap(),
            Appended::GroupOpen {
                rows: t + 1,
                needed: 4
            }
        );
    }
    assert_eq!(
        arena.drain_group(layer),
        Err(ArenaError::GroupIncomplete {
            layer,
            expected: 4,
            found: 3
        })
    );
    let r = row(&arena, 3, layer);
    assert_eq!(arena.append(layer, &r).unwrap(), Appended::GroupComplete);
    let r = row(&arena, 4, layer);
    assert_eq!(
        arena.append(layer, &r),
        Err(ArenaError::GroupNotDrained { layer, rows: 4 })
    );
    // The refused row was not written anywhere.
    assert_eq!(arena.window(layer).unwrap().len(), 4);
    assert_eq!(arena.appended(layer).unwrap(), 4);
    let group = arena.drain_group(layer).unwrap().to_vec();
    assert_eq!(group.len(), 4 * 576);
    let tokens: Vec<u8> = group.chunks_exact(576).map(|r| r[1]).collect();
    assert_eq!(tokens, [0, 1, 2, 3]);
    assert_eq!(arena.group_len(layer).unwrap(), 0);
    assert_eq!(
        arena.append(layer, &r).unwrap(),
        Appended::GroupOpen { rows: 1, needed: 4 }
    );
}

#[test]
fn hca_group_is_one_block_of_rows() {
    let mut arena = RequestArena::new(&v4()).unwrap();
    let layer = 3;
    assert_eq!(arena.scheme(layer).unwrap(), LayerScheme::Hca);
    for t in 0..127u32 {
        let r = row(&arena, t, layer);
        assert!(matches!(
            arena.append(layer, &r).unwrap(),
            Appended::GroupOpen { .. }
        ));
    }
    let r = row(&arena, 127, layer);
    assert_eq!(arena.append(layer, &r).unwrap(), Appended::GroupComplete);
    let group = arena.drain_group(layer).unwrap();
    assert_eq!(group.len(), 128 * 576);
    assert!(group
        .chunks_exact(576)
        .enumerate()
        .all(|(i, r)| r[1] == i as u8 && r[0] == 3));
}

#[test]
fn typed_errors() {
    let mut arena = RequestArena::new(&v4_flash()).unwrap();
    assert_eq!(
        arena.append(0, &[0u8; 575]),
        Err(ArenaError::RowLength {
            expected: 576,
            found: 575
        })
    );
    assert_eq!(
        arena.append(43, &[0u8; 576]),
        Err(ArenaError::UnknownLayer {
            layer: 43,
            layers: 43
        })
    );
    assert_eq!(
        arena.append(43, &[0u8; 3]),
        Err(ArenaError::UnknownLayer {
            layer: 43,
            layers: 43
        })
    );
    assert!(matches!(
        arena.window(99),
        Err(ArenaError::UnknownLayer { layer: 99, .. })
    ));
    assert_eq!(arena.drain_group(0), Err(ArenaError::NoGroups { layer: 0 }));
    assert!(
        arena.window(0).unwrap().is_empty(),
        "nothing written by refused appends"
    );
    let msg = ArenaError::RowLength {
        expected: 576,
        found: 575,
    }
    .to_string();
    assert!(
        msg.contains("expected 576") && msg.contains("found 575"),
        "{msg}"
    );
}

#[test]
fn clear_forgets_rows_but_keeps_size() {
    let mut arena = RequestArena::new(&v4()).unwrap();
    for layer in 0..arena.layers() {
        let r = row(&arena, 7, layer);
        arena.append(layer, &r).unwrap();
    }
    let bytes = arena.bytes();
    arena.clear();
    assert_eq!(arena.bytes(), bytes);
    for layer in 0..arena.layers() {
        assert!(arena.window(layer).unwrap().is_empty());
        assert_eq!(arena.group_len(layer).unwrap(), 0);
        assert_eq!(arena.appended(layer).unwrap(), 0);
    }
}

#[test]
fn a_token_is_appended_to_every_layer_or_to_none() {
    let g = v4();
    let mut arena = RequestArena::new(&g).unwrap();
    let (n, layers) = (arena.row_bytes(), arena.layers());
    let token = |t: u8| -> Vec<u8> {
        (0..layers)
            .flat_map(|l| {
                let mut r = vec![t; n];
                r[0] = l as u8;
                r
            })
            .collect()
    };
    assert_eq!(
        arena.append_token(&token(0)[1..]),
        Err(ArenaError::TokenLength {
            expected: 61 * 576,
            layers: 61,
            row_bytes: 576,
            found: 61 * 576 - 1
        })
    );
    for t in 0..4u8 {
        let done = arena.append_token(&token(t)).unwrap();
        assert_eq!(done.len(), 61);
        // Layer 2 is CSA (k1 = 4): its group completes with the fourth token.
        let expect = if t == 3 {
            Appended::GroupComplete
        } else {
            Appended::GroupOpen {
                rows: u32::from(t) + 1,
                needed: 4,
            }
        };
        assert_eq!(done[2], expect);
        assert!(matches!(done[0], Appended::GroupOpen { needed: 128, .. }));
    }
    // Every CSA group waits: the next token is refused whole, nothing written anywhere.
    assert_eq!(
        arena.append_token(&token(4)),
        Err(ArenaError::GroupNotDrained { layer: 2, rows: 4 })
    );
    for l in 0..61 {
        assert_eq!(arena.appended(l).unwrap(), 4, "layer {l}");
        let w = arena.window(l).unwrap();
        assert!(w
            .rows()
            .enumerate()
            .all(|(t, r)| r[0] == l as u8 && r[1] == t as u8));
    }
    for l in (2..61).step_by(2) {
        assert_eq!(arena.drain_group(l).unwrap().len(), 4 * 576);
    }
    assert_eq!(arena.append_token(&token(4)).unwrap().len(), 61);
}

#[test]
fn the_table_creates_reads_and_frees_within_its_bounds() {
    let g = v4();
    let size = RequestArena::size_for(&g).unwrap();
    let mut table = Arenas::new(ArenaLimits {
        arenas_max: 3,
        bytes_max: ByteCount(2 * size.0 + 1),
    });
    let a = table.create(&g).unwrap();
    let b = table.create(&g).unwrap();
    assert_ne!(a, b);
    assert_eq!((table.len(), table.bytes()), (2, ByteCount(2 * size.0)));
    assert_eq!(
        table.create(&g),
        Err(ArenaError::OverBudget {
            needed: size,
            used: ByteCount(2 * size.0),
            max: ByteCount(2 * size.0 + 1)
        })
    );
    match table.create(&builtin_preset("deepseek-v3").unwrap()) {
        Err(ArenaError::NotHybrid { name, .. }) => assert_eq!(name, "deepseek-v3"),
        other => panic!("{other:?}"),
    }
    assert_eq!(table.model(a).unwrap(), "deepseek-v4-pro");
    let row = vec![9u8; 576];
    assert_eq!(
        table.append(a, 0, &row).unwrap(),
        Appended::GroupOpen {
            rows: 1,
            needed: 128
        }
    );
    assert_eq!(table.window(a, 0).unwrap().len(), 1);
    assert!(
        table.window(b, 0).unwrap().is_empty(),
        "arenas are separate"
    );
    assert_eq!(table.free(a).unwrap(), size);
    assert_eq!(table.free(a), Err(ArenaError::UnknownArena(a.0)));
    assert_eq!(
        table.window(a, 0).err(),
        Some(ArenaError::UnknownArena(a.0))
    );
    assert_eq!(table.bytes(), size);
    let c = table.create(&g).unwrap();
    assert!(c.0 > b.0, "ids are not reused");
    let mut small = Arenas::new(ArenaLimits {
        arenas_max: 1,
        bytes_max: ByteCount(u64::MAX),
    });
    small.create(&g).unwrap();
    assert_eq!(small.create(&g), Err(ArenaError::TooManyArenas { max: 1 }));
}
