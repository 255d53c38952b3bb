//! Unit tests of the checker on hand-written histories, each small enough to verify by eye.

use super::*;
use crate::linearizability::history::{Call, History, Operation, Ret};

fn w(client: u32, v: u64, inv: u64, ret: u64) -> Operation {
    Operation {
        client,
        key: 0,
        call: Call::Write(v),
        invoke_ns: inv,
        complete: Some((ret, Ret::Written)),
    }
}

fn r(client: u32, seen: Option<u64>, inv: u64, ret: u64) -> Operation {
    Operation {
        client,
        key: 0,
        call: Call::Read,
        invoke_ns: inv,
        complete: Some((ret, Ret::Read(seen))),
    }
}

fn check(ops: Vec<Operation>) -> Verdict {
    check_registers(&History { ops }, None, CheckLimits::default())
}

#[test]
fn sequential_history_is_linearizable() {
    let v = check(vec![
        w(1, 1, 0, 10),
        r(2, Some(1), 20, 30),
        w(1, 2, 40, 50),
        r(2, Some(2), 60, 70),
    ]);
    assert!(matches!(v, Verdict::Linearizable { ops: 4, .. }), "{v:?}");
}

#[test]
fn concurrent_read_may_see_either_value() {
    // The read overlaps the write of 2: both the old and the new value are fine.
    for seen in [Some(1), Some(2)] {
        let v = check(vec![w(1, 1, 0, 10), w(1, 2, 20, 50), r(2, seen, 30, 40)]);
        assert!(matches!(v, Verdict::Linearizable { .. }), "{seen:?}: {v:?}");
    }
}

#[test]
fn stale_read_after_completed_write_is_caught() {
    // Write 2 completed at 50; a read invoked at 60 returns the old value 1.
    let v = check(vec![w(1, 1, 0, 10), w(1, 2, 20, 50), r(2, Some(1), 60, 70)]);
    assert!(
        matches!(v, Verdict::NotLinearizable { key: 0, .. }),
        "{v:?}"
    );
}

#[test]
fn read_of_unwritten_value_is_caught() {
    let v = check(vec![w(1, 1, 0, 10), r(2, Some(9), 20, 30)]);
    assert!(matches!(v, Verdict::NotLinearizable { .. }), "{v:?}");
}

#[test]
fn reads_cannot_go_back_in_time() {
    // Two sequential reads, both concurrent with the write: new then old is not allowed.
    let v = check(vec![
        w(1, 1, 0, 10),
        w(1, 2, 20, 100),
        r(2, Some(2), 30, 40),
        r(3, Some(1), 50, 60),
    ]);
    assert!(matches!(v, Verdict::NotLinearizable { .. }), "{v:?}");
}

#[test]
fn pending_write_may_take_effect_late_or_never() {
    let pending = Operation {
        client: 1,
        key: 0,
        call: Call::Write(7),
        invoke_ns: 20,
        complete: None,
    };
    let late = check(vec![
        w(1, 1, 0, 10),
        pending,
        r(2, Some(1), 30, 40),
        r(2, Some(7), 50, 60),
    ]);
    assert!(matches!(late, Verdict::Linearizable { .. }), "{late:?}");
    let never = check(vec![w(1, 1, 0, 10), pending, r(2, Some(1), 300, 400)]);
    assert!(matches!(never, Verdict::Linearizable { .. }), "{never:?}");
}

#[test]
fn keys_are_independent() {
    let mut other = r(2, None, 60, 70);
    other.key = 5;
    let v = check(vec![w(1, 1, 0, 10), other]);
    assert!(matches!(v, Verdict::Linearizable { keys: 2, .. }), "{v:?}");
}

#[test]
fn bounds_give_unknown_not_a_pass() {
    let ops: Vec<Operation> = (0..20).map(|i| w(i as u32, i, 0, 1_000)).collect();
    let v = check_registers(
        &History { ops: ops.clone() },
        None,
        CheckLimits {
            ops_per_key_max: 10,
            states_max: 1_000,
        },
    );
    assert!(matches!(v, Verdict::Unknown { .. }), "{v:?}");
    // 20 fully concurrent writes then an impossible read: the search must exhaust its budget.
    let mut ops = ops;
    ops.push(r(99, Some(1_000), 2_000, 2_001));
    let v = check_registers(
        &History { ops },
        None,
        CheckLimits {
            ops_per_key_max: 200,
            states_max: 1_000,
        },
    );
    assert!(matches!(v, Verdict::Unknown { .. }), "{v:?}");
}
