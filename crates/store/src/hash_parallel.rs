//! Keyed blake3 of one buffer on two threads, each filling its part piece by piece and hashing
//! every piece while it is still in cache (the disk tier's verified read).
//!
//! blake3 is a tree: the root is the parent of a left subtree of `left_subtree_len(n)` bytes (a
//! power of two) and a right subtree of the rest, and subtrees hash independently. So the work
//! splits at subtree boundaries: either left | right, or, when the right part is small, the two
//! halves of the left subtree on one side and the right part with the second half on the other.
//! The result is bit-identical to hashing the buffer in one pass (tested against
//! [`crate::Blake3Ids`]).
//!
//! [`fill_and_verify_two_threads`] is the same fill and hash ending in a [`VerifiedBlock`]:
//! the id is computed here, from the bytes as filled, and only a match with the id asked for
//! becomes a block (a transport's one-sided read of a block mapped into its process).

use std::mem::MaybeUninit;
use std::ops::Range;

use blake3::hazmat::{
    left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, ChainingValue, HasherExt, Mode,
};

use crate::id::{id_of_digest, BlockId, NamespaceKey, StreamingId};
use crate::verified::VerifiedBlock;

/// Bytes filled and hashed at a time by each thread.
pub const PIECE_BYTES: usize = 256 << 10;

/// Smallest buffer worth two threads (below it, thread start-up outweighs the split).
pub const TWO_THREADS_MIN_BYTES: usize = 1 << 20;

/// How the buffer's subtrees are shared between the two threads.
enum Plan {
    /// Caller: left subtree; helper: right subtree.
    Halves { left: usize },
    /// Caller: first half of the left subtree; helper: its second half, then the right subtree.
    Quarters { left: usize },
}

fn plan(n: usize) -> Plan {
    let left = left_subtree_len(n as u64) as usize;
    if n - left >= left / 2 {
        Plan::Halves { left }
    } else {
        Plan::Quarters { left }
    }
}

/// A filler: writes every byte of `piece` (which sits at `offset` in the buffer) and returns
/// `Ok`, or returns an error. Returning `Ok` with any byte unwritten is undefined behaviour:
/// that is why [`fill_and_hash_two_threads`] is `unsafe`.
pub type Fill<'a, E> = dyn Fn(&mut [MaybeUninit<u8>], usize) -> Result<(), E> + Sync + 'a;

/// Hashes the subtree at `range` of the buffer `part` (which starts at buffer offset `base`),
/// filling each piece first.
///
/// # Safety
/// `fill` must write every byte of a piece before returning `Ok`.
unsafe fn subtree<E>(
    key: &NamespaceKey,
    part: &mut [MaybeUninit<u8>],
    base: usize,
    range: Range<usize>,
    fill: &Fill<'_, E>,
) -> Result<ChainingValue, E> {
    let mut h = blake3::Hasher::new_keyed(&key.0);
    h.set_input_offset(range.start as u64);
    let mut at = range.start;
    for piece in part[range.start - base..range.end - base].chunks_mut(PIECE_BYTES) {
        fill(piece, at)?;
        // SAFETY: `fill` returned Ok, so every byte of `piece` is initialised.
        let bytes = unsafe { std::slice::from_raw_parts(piece.as_ptr().cast::<u8>(), piece.len()) };
        h.update(bytes);
        at += piece.len();
    }
    Ok(h.finalize_non_root())
}

/// Fills `buf` through `fill(piece, offset)` and returns its keyed blake3 id, using the calling
/// thread and one scoped helper thread. The buffer is never zeroed first: each piece is written
/// once, by `fill`. `None` if the helper could not be started (nothing filled; the caller falls
/// back to one thread). On `Some(Ok(_))` every byte of `buf` is initialised. `buf` must be at
/// least [`TWO_THREADS_MIN_BYTES`].
///
/// # Safety
/// `fill` must write every byte of the piece it is given before returning `Ok`.
pub unsafe fn fill_and_hash_two_threads<E: Send>(
    key: &NamespaceKey,
    buf: &mut [MaybeUninit<u8>],
    fill: &Fill<'_, E>,
) -> Option<Result<BlockId, E>> {
    let n = buf.len();
    assert!(
        n >= TWO_THREADS_MIN_BYTES,
        "two threads need at least {TWO_THREADS_MIN_BYTES} B"
    );
    let mode = Mode::KeyedHash(&key.0);
    let split = match plan(n) {
        Plan::Halves { left } => left,
        Plan::Quarters { left } => left / 2,
    };
    let (mine, theirs) = buf.split_at_mut(split);
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            .name("kvfabric-hash".into())
            .spawn_scoped(s, move || -> Result<Vec<ChainingValue>, E> {
                // SAFETY: forwarded from this function's contract on `fill`.
                unsafe {
                    match plan(n) {
                        Plan::Halves { left } => {
                            Ok(vec![subtree(key, theirs, split, left..n, fill)?])
                        }
                        Plan::Quarters { left } => Ok(vec![
                            subtree(key, theirs, split, split..left, fill)?,
                            subtree(key, theirs, split, left..n, fill)?,
                        ]),
                    }
                }
            })
            .ok()?;
        // SAFETY: forwarded from this function's contract on `fill`.
        let first = unsafe { subtree(key, mine, 0, 0..split, fill) };
        let rest = helper.join().expect("the hashing thread does not panic");
        Some((|| {
            let (first, rest) = (first?, rest?);
            let root = match rest.as_slice() {
                [right] => merge_subtrees_root(&first, right, mode),
                [second, right] => {
                    let left = merge_subtrees_non_root(&first, second, mode);
                    merge_subtrees_root(&left, right, mode)
                }
                _ => unreachable!("one or two subtrees"),
            };
            Ok(id_of_digest(*root.as_bytes()))
        })())
    })
}

/// What [`fill_and_verify_two_threads`] made of a block.
#[derive(Debug)]
pub enum Filled<E> {
    /// Every byte filled, and they hash to the id asked for.
    Verified(VerifiedBlock),
    /// Every byte filled, and they hash to `found`, not the id asked for (the bytes are
    /// dropped).
    Mismatch {
        /// What the bytes hash to.
        found: BlockId,
    },
    /// `fill` failed (the bytes are dropped).
    FillFailed(E),
    /// Not attempted, nothing filled: the block is below [`TWO_THREADS_MIN_BYTES`] or the
    /// helper thread could not start. The buffer comes back for a one-thread receipt.
    NotTaken(Vec<u8>),
}

/// Fills a block of `len` bytes (header ‖ payload, all of it covered by the id) through
/// `fill(piece, offset)` on the calling thread and one helper, hashing each piece under
/// `namespace` while it is in cache, into `buf` (emptied; its capacity is reused if large
/// enough); only bytes hashing to `id` become a [`VerifiedBlock`].
///
/// # Safety
/// `fill` must write every byte of the piece it is given before returning `Ok`.
pub unsafe fn fill_and_verify_two_threads<E: Send>(
    namespace: NamespaceKey,
    id: BlockId,
    mut buf: Vec<u8>,
    len: usize,
    fill: &Fill<'_, E>,
) -> Filled<E> {
    if len < TWO_THREADS_MIN_BYTES {
        return Filled::NotTaken(buf);
    }
    buf.clear();
    buf.reserve_exact(len);
    // SAFETY: forwarded from this function's contract on `fill`.
    let done = unsafe {
        fill_and_hash_two_threads(&namespace, &mut buf.spare_capacity_mut()[..len], fill)
    };
    match done {
        None => Filled::NotTaken(buf),
        Some(Err(e)) => Filled::FillFailed(e),
        Some(Ok(found)) => {
            // SAFETY: Ok means every byte of [0, len) was written by `fill`.
            unsafe { buf.set_len(len) };
            if found != id {
                return Filled::Mismatch { found };
            }
            Filled::Verified(VerifiedBlock::checked(id, namespace, buf))
        }
    }
}

/// Fills a new buffer of `n` bytes through `fill(piece, offset)` and returns it with its
/// keyed id under `key`: on two threads when it is large enough and the helper starts
/// ([`fill_and_hash_two_threads`]), else on the calling thread, [`PIECE_BYTES`] at a time,
/// each piece hashed while it is in cache. The buffer is never zeroed first. (The disk tier's
/// verified read and the device tier's.)
///
/// # Safety
/// `fill` must write every byte of the piece it is given before returning `Ok`.
pub unsafe fn fill_and_hash<E: Send>(
    key: &NamespaceKey,
    n: usize,
    fill: &Fill<'_, E>,
) -> Result<(Vec<u8>, BlockId), E> {
    let mut buf: Vec<u8> = Vec::with_capacity(n);
    if n >= TWO_THREADS_MIN_BYTES {
        // SAFETY: forwarded from this function's contract on `fill`.
        let done =
            unsafe { fill_and_hash_two_threads(key, &mut buf.spare_capacity_mut()[..n], fill) };
        if let Some(done) = done {
            let id = done?;
            // SAFETY: Ok means every byte of [0, n) was written by `fill`.
            unsafe { buf.set_len(n) };
            return Ok((buf, id));
        }
    }
    let mut hasher = StreamingId::new(key);
    while buf.len() < n {
        let at = buf.len();
        // The spare capacity starts at `at`, the bytes written so far.
        let piece = &mut buf.spare_capacity_mut()[..PIECE_BYTES.min(n - at)];
        let len = piece.len();
        fill(piece, at)?;
        // SAFETY: `fill` returned Ok, so it wrote every byte of [at, at + len).
        unsafe { buf.set_len(at + len) };
        hasher.update(&buf[at..]);
    }
    Ok((buf, hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{Blake3Ids, IdHasher};

    #[test]
    fn equals_a_one_pass_hash_for_every_shape() {
        let key = NamespaceKey::derive("t");
        let src: Vec<u8> = (0..6_000_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for n in [
            1 << 20,
            (1 << 20) + 1,
            1_500_000,
            2 << 20,
            3_000_001,
            4_497_472,
            5_000_000,
            6_000_000,
        ] {
            let mut buf = vec![MaybeUninit::<u8>::uninit(); n];
            // SAFETY: the filler writes every byte of each piece.
            let id = unsafe {
                fill_and_hash_two_threads::<()>(&key, &mut buf, &|piece, at| {
                    for (d, s) in piece.iter_mut().zip(&src[at..]) {
                        d.write(*s);
                    }
                    Ok(())
                })
            }
            .expect("thread")
            .expect("fill");
            // SAFETY: filled above.
            let filled: Vec<u8> = buf.iter().map(|b| unsafe { b.assume_init() }).collect();
            assert_eq!(filled, src[..n], "filled in place ({n})");
            assert_eq!(
                id,
                Blake3Ids.id(&key, &[&src[..n]]),
                "same id as one pass ({n})"
            );
        }
    }

    #[test]
    fn a_fill_error_is_returned() {
        let key = NamespaceKey::derive("t");
        let mut buf = vec![MaybeUninit::<u8>::uninit(); 3 << 20];
        // SAFETY: the filler never returns Ok without writing the piece.
        let r = unsafe {
            fill_and_hash_two_threads(&key, &mut buf, &|piece, at| {
                if at >= 2 << 20 {
                    return Err(at);
                }
                piece.iter_mut().for_each(|b| {
                    b.write(0);
                });
                Ok(())
            })
        };
        assert!(matches!(r, Some(Err(_))));
    }

    #[test]
    fn only_bytes_hashing_to_the_id_become_a_block() {
        let key = NamespaceKey::derive("t");
        let src: Vec<u8> = (0..3_000_001u32).map(|i| (i % 251) as u8).collect();
        let id = Blake3Ids.id(&key, &[&src]);
        let copy = |flip: Option<usize>| {
            let src = &src;
            move |piece: &mut [MaybeUninit<u8>], at: usize| -> Result<(), ()> {
                for (i, d) in piece.iter_mut().enumerate() {
                    let b = src[at + i];
                    d.write(if flip == Some(at + i) { b ^ 1 } else { b });
                }
                Ok(())
            }
        };
        // SAFETY: the filler writes every byte of each piece.
        match unsafe { fill_and_verify_two_threads(key, id, Vec::new(), src.len(), &copy(None)) } {
            Filled::Verified(block) => {
                assert_eq!((block.id(), block.bytes()), (id, &src[..]));
            }
            other => panic!("expected a block, found {other:?}"),
        }
        let lie = copy(Some(2_999_000));
        // SAFETY: as above.
        match unsafe { fill_and_verify_two_threads(key, id, Vec::new(), src.len(), &lie) } {
            Filled::Mismatch { found } => assert_ne!(found, id),
            other => panic!("expected a mismatch, found {other:?}"),
        }
        // SAFETY: as above.
        let small = unsafe { fill_and_verify_two_threads(key, id, vec![1, 2], 1000, &copy(None)) };
        assert!(matches!(small, Filled::NotTaken(buf) if buf == [1, 2]));
    }
}
