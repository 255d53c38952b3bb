//! The router's choice: backends ordered by estimated time adjusted for load.
//!
//! For a scored policy the node's `POST /v1/route` answers, per node, `est_seconds`: the time
//! that node would take to have the request's blocks (fetching what other nodes hold at the
//! measured bandwidth, recomputing what nobody holds). The router's cost of a backend is
//!
//! ```text
//! cost = (est_seconds + 0.001) × (1 + load)      load = requests in flight + load override
//! ```
//!
//! i.e. its node's estimate (plus a 1 ms floor, so that load also separates backends whose
//! estimate is 0), stretched by the queue the backend already has. A backend whose node the
//! route answer does not list costs the worst listed estimate. Lowest cost first; ties go to
//! the backend next in round-robin order, so equal backends share the load.

/// Seconds added to every estimate before the load factor.
pub const LOAD_FLOOR_S: f64 = 0.001;

/// One backend as the router ranks it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Index into the router's backends.
    pub index: usize,
    /// Its node's estimate (the worst listed one if its node was not listed).
    pub est_seconds: f64,
    /// Requests in flight plus the load override.
    pub load: u64,
    /// The cost it was ranked by.
    pub cost: f64,
}

/// The cost of a backend whose node estimates `est_seconds` and which has `load`.
pub fn cost(est_seconds: f64, load: u64) -> f64 {
    (est_seconds.max(0.0) + LOAD_FLOOR_S) * (1.0 + load as f64)
}

/// Backends in round-robin order from `start`.
pub fn rotation(n: usize, start: usize) -> Vec<usize> {
    (0..n).map(|k| (start + k) % n.max(1)).collect()
}

/// Backends best first, given each one's node estimate (`None`: not listed) and load, ties
/// broken by round-robin order from `start`.
pub fn rank(est: &[Option<f64>], loads: &[u64], start: usize) -> Vec<Candidate> {
    let n = est.len();
    let worst = est.iter().flatten().copied().fold(0.0_f64, f64::max);
    let mut c: Vec<Candidate> = (0..n)
        .map(|i| {
            let e = est[i].unwrap_or(worst);
            Candidate {
                index: i,
                est_seconds: e,
                load: loads[i],
                cost: cost(e, loads[i]),
            }
        })
        .collect();
    c.sort_by(|a, b| {
        a.cost.total_cmp(&b.cost).then_with(|| {
            ((a.index + n - start % n.max(1)) % n).cmp(&((b.index + n - start % n.max(1)) % n))
        })
    });
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(c: &[Candidate]) -> Vec<usize> {
        c.iter().map(|c| c.index).collect()
    }

    #[test]
    fn the_lowest_estimate_wins_when_loads_are_equal() {
        let r = rank(&[Some(0.5), Some(0.0), Some(0.2)], &[0, 0, 0], 0);
        assert_eq!(order(&r), vec![1, 2, 0]);
        assert!((r[0].cost - 0.001).abs() < 1e-12);
    }

    #[test]
    fn load_moves_a_request_away_from_a_busy_backend() {
        // Backend 1 holds every block (estimate 0) but has 10 requests in flight.
        let r = rank(&[Some(0.004), Some(0.0), Some(0.004)], &[0, 10, 0], 0);
        assert_eq!(r[0].index, 0);
        assert_eq!(r[2].index, 1);
        assert!((r[2].cost - 0.011).abs() < 1e-12);
    }

    #[test]
    fn ties_rotate_and_unlisted_nodes_cost_the_worst_estimate() {
        assert_eq!(
            order(&rank(&[None, None, None], &[0, 0, 0], 2)),
            vec![2, 0, 1]
        );
        // Backend 0 is not listed: it costs 0.3 like backend 1 and comes first in turn.
        let r = rank(&[None, Some(0.3), Some(0.1)], &[0, 0, 0], 0);
        assert_eq!(order(&r), vec![2, 0, 1]);
        assert_eq!(r[1].est_seconds, 0.3);
        assert_eq!(
            order(&rank(&[None, Some(0.3), Some(0.1)], &[0, 0, 0], 1)),
            vec![2, 1, 0]
        );
        assert_eq!(rotation(3, 4), vec![1, 2, 0]);
    }
}
