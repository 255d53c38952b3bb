//! The checker on hand-made histories: each violation kind is found, and a clean history
//! passes.

use super::*;
use crate::history::{Fault, FaultKind, Op};

fn op(client: u32, node: u64, request: Request, t: (f64, f64), outcome: Outcome) -> Op {
    Op {
        client,
        node,
        request,
        invoke_ms: t.0,
        complete_ms: t.1,
        outcome,
    }
}

const B: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const K: &str = "1111111111111111111111111111111111111111111111111111111111111111";

fn put_ok() -> Op {
    op(
        0,
        1,
        Request::Put {
            seed: 1,
            key: K.into(),
        },
        (0.0, 10.0),
        Outcome::Put {
            block: B.into(),
            replicas: 2,
            holders: vec![1, 2],
        },
    )
}

fn lookup(t: (f64, f64), block: Option<&str>) -> Op {
    op(
        1,
        2,
        Request::Lookup { key: K.into() },
        t,
        Outcome::Looked {
            block: block.map(str::to_owned),
            owners: vec![],
        },
    )
}

fn end(holders: Vec<u64>) -> FinalState {
    FinalState {
        holders: BTreeMap::from([(B.to_owned(), holders)]),
        mapped: BTreeMap::from([(K.to_owned(), Some(B.to_owned()))]),
        converged_s: Some(1.0),
        converge_bound_s: 60.0,
        converge_note: String::new(),
        interrupted: false,
        rotted: BTreeMap::new(),
        replicas_at: Some("T2-Nn1-40".into()),
        replicas_diverged: None,
    }
}

#[test]
fn a_clean_history_passes() {
    let h = Recorded {
        ops: vec![
            put_ok(),
            lookup((5.0, 6.0), None),
            lookup((20.0, 21.0), Some(B)),
        ],
        faults: vec![],
    };
    let c = check(&h, &end(vec![1, 2]));
    assert!(c.violations.is_empty(), "{:?}", c.violations);
    assert_eq!((c.acked_checked, c.keys_checked), (1, 1));
}

#[test]
fn a_stale_read_after_the_write_is_not_linearizable() {
    let h = Recorded {
        ops: vec![put_ok(), lookup((20.0, 21.0), None)],
        faults: vec![],
    };
    assert_eq!(check(&h, &end(vec![1, 2])).by_kind()["not_linearizable"], 1);
}

#[test]
fn wrong_bytes_are_a_wrong_read() {
    let get = op(
        2,
        3,
        Request::Get {
            block: B.into(),
            seed: 1,
        },
        (20.0, 21.0),
        Outcome::Got {
            bytes_match: false,
            source: "n3".into(),
        },
    );
    let h = Recorded {
        ops: vec![put_ok(), get],
        faults: vec![],
    };
    assert_eq!(check(&h, &end(vec![1, 2])).by_kind()["wrong_read"], 1);
}

fn fault(kind: FaultKind, node: u64, in_memory: &[&str]) -> Fault {
    Fault {
        kind,
        nodes: vec![node],
        hit_leader: false,
        start_ms: 30.0,
        end_ms: 40.0,
        detail: String::new(),
        in_memory: in_memory.iter().map(|b| b.to_string()).collect(),
        snapshot_ms: 29.0,
    }
}

#[test]
fn a_lost_block_is_excused_only_when_every_holder_lost_its_copy() {
    let lost = |faults: Vec<Fault>| {
        let h = Recorded {
            ops: vec![put_ok()],
            faults,
        };
        let c = check(&h, &end(vec![]));
        (
            c.by_kind().get("lost_acked_block").copied().unwrap_or(0),
            c.lost_excused,
        )
    };
    // One holder wiped, the other untouched: a loss nobody excuses.
    assert_eq!(lost(vec![fault(FaultKind::KillWipe, 1, &[])]), (1, 0));
    // Two nodes failed, but n3 was not a holder (the old rule excused this).
    let not_holders = vec![
        fault(FaultKind::KillWipe, 1, &[]),
        fault(FaultKind::KillWipe, 3, &[]),
    ];
    assert_eq!(lost(not_holders), (1, 0));
    // Both holders wiped: excused.
    let both = vec![
        fault(FaultKind::KillWipe, 1, &[]),
        fault(FaultKind::KillWipe, 2, &[]),
    ];
    assert_eq!(lost(both), (0, 1));
    // n2 killed with its copy on disk (its snapshot says so: not in memory): not excused.
    let on_disk = vec![
        fault(FaultKind::KillWipe, 1, &[]),
        fault(FaultKind::Kill, 2, &[]),
    ];
    assert_eq!(lost(on_disk), (1, 0));
    // n2 killed with the copy in memory: excused.
    let in_memory = vec![
        fault(FaultKind::KillWipe, 1, &[]),
        fault(FaultKind::Kill, 2, &[B]),
    ];
    assert_eq!(lost(in_memory), (0, 1));
}

#[test]
fn a_holder_killed_after_a_client_read_its_copy_since_the_snapshot_lost_it() {
    // The snapshot (at 29 ms) saw n2's copy on disk; a local get may have promoted it before
    // the kill (30 ms).
    let get = |node: u64, t: f64, outcome: Outcome| {
        op(
            3,
            node,
            Request::Get {
                block: B.into(),
                seed: 1,
            },
            (t, t + 0.5),
            outcome,
        )
    };
    let local = || Outcome::Got {
        bytes_match: true,
        source: "local".into(),
    };
    let lost = |gets: Vec<Op>| {
        let mut ops = vec![put_ok()];
        ops.extend(gets);
        let h = Recorded {
            ops,
            faults: vec![
                fault(FaultKind::KillWipe, 1, &[]),
                fault(FaultKind::Kill, 2, &[]),
            ],
        };
        let c = check(&h, &end(vec![]));
        (
            c.by_kind().get("lost_acked_block").copied().unwrap_or(0),
            c.lost_excused,
        )
    };
    assert_eq!(
        lost(vec![]),
        (1, 0),
        "on disk at the kill, as far as anyone knows"
    );
    assert_eq!(
        lost(vec![get(2, 29.5, local())]),
        (0, 1),
        "read on n2 in the gap"
    );
    let no_answer = Outcome::NoAnswer {
        error: "io: reset".into(),
    };
    assert_eq!(lost(vec![get(2, 29.5, no_answer)]), (0, 1), "maybe served");
    // Not a promotion of n2's copy: read before the snapshot (the snapshot saw where it was
    // after), read on another node, or served from a peer.
    assert_eq!(lost(vec![get(2, 20.0, local())]), (1, 0));
    assert_eq!(lost(vec![get(3, 29.5, local())]), (1, 0));
    let from_peer = Outcome::Got {
        bytes_match: true,
        source: "n1".into(),
    };
    assert_eq!(lost(vec![get(2, 29.5, from_peer)]), (1, 0));
}

#[test]
fn a_copy_its_holder_found_rotten_counts_as_lost_by_that_holder() {
    let h = Recorded {
        ops: vec![put_ok()],
        faults: vec![fault(FaultKind::KillWipe, 1, &[])],
    };
    let judged = |rotted: &[(u64, &str)]| {
        let mut e = end(vec![]);
        for (node, block) in rotted {
            e.rotted.entry(*node).or_default().insert(block.to_string());
        }
        let c = check(&h, &e);
        (
            c.by_kind().get("lost_acked_block").copied().unwrap_or(0),
            c.lost_excused,
        )
    };
    // n1 wiped, n2's copy untouched: not excused.
    assert_eq!(judged(&[]), (1, 0));
    // n2 reported another block rotten, or n3 (no holder) this one: still not.
    assert_eq!(judged(&[(2, K), (3, B)]), (1, 0));
    // n2's own copy failed verification and was dropped: both holders lost it.
    assert_eq!(judged(&[(2, B)]), (0, 1));
}

#[test]
fn no_convergence_is_a_violation() {
    let mut e = end(vec![1, 2]);
    e.converged_s = None;
    let h = Recorded {
        ops: vec![put_ok()],
        faults: vec![],
    };
    assert_eq!(check(&h, &e).by_kind()["not_converged"], 1);
}

#[test]
fn directory_replicas_that_differ_at_one_entry_are_a_violation() {
    let h = Recorded {
        ops: vec![put_ok()],
        faults: vec![],
    };
    let mut e = end(vec![1, 2]);
    assert!(!check(&h, &e).by_kind().contains_key("replicas_diverged"));
    e.replicas_diverged = Some("n1 aa, n2 aa, n3 bb".into());
    let r = check(&h, &e);
    assert_eq!(r.by_kind()["replicas_diverged"], 1);
    assert!(
        r.violations.iter().any(|v| v.detail.contains("T2-Nn1-40")),
        "{:?}",
        r.violations
    );
}

#[test]
fn an_interrupted_final_phase_judges_only_what_it_probed() {
    // Cut short before convergence and before any block was probed: nothing is lost or
    // unconverged for want of a look, and the history's own checks still run.
    let mut e = end(vec![]);
    e.converged_s = None;
    e.interrupted = true;
    e.holders.clear();
    e.mapped.clear();
    let h = Recorded {
        ops: vec![put_ok()],
        faults: vec![],
    };
    let c = check(&h, &e);
    assert!(c.violations.is_empty(), "{:?}", c.violations);
    assert_eq!(c.acked_checked, 0);
}

#[test]
fn a_route_refused_for_valid_input_is_a_bad_route() {
    let route = |outcome| {
        op(
            2,
            3,
            Request::Route { key: K.into() },
            (30.0, 31.0),
            outcome,
        )
    };
    let h = Recorded {
        ops: vec![
            put_ok(),
            route(Outcome::Routed {
                nodes: vec!["n1".into()],
                best_hits: 1,
            }),
            route(Outcome::Refused {
                status: 503,
                code: "not_ready".into(),
            }),
            route(Outcome::Refused {
                status: 400,
                code: "model_required".into(),
            }),
        ],
        faults: vec![],
    };
    let c = check(&h, &end(vec![1, 2]));
    assert_eq!(c.routes_checked, 3);
    assert_eq!(c.by_kind().get("bad_route"), Some(&1), "{:?}", c.violations);
}

#[test]
fn availability_shortfalls_are_violations_unless_only_reported() {
    // A kill during which the one put to a node it spared (n2) got no answer.
    let mut put = put_ok();
    put.node = 2;
    put.invoke_ms = 35.0;
    put.complete_ms = 3_035.0;
    put.outcome = Outcome::NoAnswer {
        error: "timeout".into(),
    };
    let h = Recorded {
        ops: vec![put_ok(), put],
        faults: vec![fault(FaultKind::Kill, 1, &[])],
    };
    let judged = check(&h, &end(vec![1, 2]));
    assert!(judged.by_kind().get("unavailable").copied().unwrap_or(0) >= 1);
    let reported = check_with(&h, &end(vec![1, 2]), false);
    assert_eq!(reported.by_kind().get("unavailable"), None);
    assert!(!reported.availability_judged);
    assert_eq!(
        reported.availability, judged.availability,
        "the same table either way"
    );
}

#[test]
fn unavailability_after_a_leader_loss_counts_only_puts_to_spared_nodes() {
    // n1, the leader, is paused from 30 to 40 ms. A put sent to n1 at 31 ms waits for it
    // (done at 45); the first put sent to a spared node, n2, at 32 ms is done at 37.
    let mut pause = fault(FaultKind::Pause, 1, &[]);
    pause.hit_leader = true;
    let at = |node: u64, t: (f64, f64)| {
        let mut p = put_ok();
        p.node = node;
        p.invoke_ms = t.0;
        p.complete_ms = t.1;
        p
    };
    let h = Recorded {
        ops: vec![at(1, (31.0, 45.0)), at(2, (32.0, 37.0))],
        faults: vec![pause.clone()],
    };
    let c = check_with(&h, &end(vec![1, 2]), false);
    assert_eq!(c.unavailability_ms, vec![7.0]);
    assert_eq!(c.leader_losses_unprobed, 0);
    // With every put of the fault sent to n1, nothing measures the fabric: unprobed.
    let h = Recorded {
        ops: vec![at(1, (31.0, 45.0)), at(2, (41.0, 43.0))],
        faults: vec![pause],
    };
    let c = check_with(&h, &end(vec![1, 2]), false);
    assert!(c.unavailability_ms.is_empty(), "{:?}", c.unavailability_ms);
    assert_eq!(c.leader_losses_unprobed, 1);
}
