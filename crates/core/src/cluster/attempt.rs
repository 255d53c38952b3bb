//! Exchanges with several candidate peers, each attempt bounded, hedged when slow: the
//! drivers of replication (`need` copies from a ranked list of members) and of reads (the
//! first owner that serves).
//!
//! Candidates are started in their ranked order. A candidate that fails is replaced at once
//! by the next; a candidate that has not answered within `hedge` gets company — the next one
//! starts beside it (the slow one keeps running, and whichever answers first counts). Every
//! attempt is bounded by the caller (its `attempt` future ends in a typed timeout), so the
//! whole exchange is bounded by the candidates' count times the attempt bound. Attempts still
//! running when enough succeeded are dropped (a dropped fetch is cancelled: its stream reset,
//! its buffer freed, nothing installed; a dropped push is too, unless its peer had the whole
//! block already, which then keeps a copy) and named in [`Gathered::abandoned`]: the caller
//! probes them, so that a silent one is still suspected rather than hedged again by every
//! request, without moving a block for nothing.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};

/// The attempts in flight: each candidate's index and outcome.
type Running<'a, T, E> =
    FuturesUnordered<Pin<Box<dyn Future<Output = (usize, Result<T, E>)> + Send + 'a>>>;

/// The result of [`until`].
pub(crate) struct Gathered<C, T, E> {
    /// Candidates that succeeded, with what they gave (at most `need`).
    pub(crate) won: Vec<(C, T)>,
    /// Candidates that failed, with why, in the order they did.
    pub(crate) failed: Vec<(C, E)>,
    /// Candidates started (tried).
    pub(crate) tried: usize,
    /// Candidates still running when enough had succeeded (dropped unanswered).
    pub(crate) abandoned: Vec<C>,
}

/// Runs `start(c)` over `candidates` in order until `need` succeeded or every candidate was
/// tried: at most `need` at once plus one hedge each time `hedge` passes with nothing heard.
pub(crate) async fn until<'a, C, T, E, F, Fut>(
    candidates: Vec<C>,
    need: usize,
    hedge: Duration,
    mut start: F,
) -> Gathered<C, T, E>
where
    C: Clone,
    F: FnMut(C) -> Fut,
    Fut: Future<Output = Result<T, E>> + Send + 'a,
    T: 'a,
    E: 'a,
{
    let mut out = Gathered {
        won: Vec::new(),
        failed: Vec::new(),
        tried: 0,
        abandoned: Vec::new(),
    };
    if need == 0 {
        return out;
    }
    let mut running: Running<'a, T, E> = FuturesUnordered::new();
    let mut pending: Vec<Option<C>> = Vec::new();
    let mut launch = |running: &mut Running<'a, T, E>, pending: &mut Vec<Option<C>>| -> bool {
        let Some(c) = candidates.get(pending.len()).cloned() else {
            return false;
        };
        let i = pending.len();
        let fut = start(c.clone());
        pending.push(Some(c));
        running.push(Box::pin(async move { (i, fut.await) }));
        true
    };
    for _ in 0..need {
        if !launch(&mut running, &mut pending) {
            break;
        }
    }
    while !running.is_empty() {
        tokio::select! {
            next = running.next() => {
                let Some((i, r)) = next else { break };
                let c = pending[i].take().expect("each candidate answers once");
                match r {
                    Ok(t) => {
                        out.won.push((c, t));
                        if out.won.len() >= need {
                            break;
                        }
                    }
                    Err(e) => {
                        out.failed.push((c, e));
                        // Replace the failed one, unless enough are already running.
                        if running.len() + out.won.len() < need {
                            launch(&mut running, &mut pending);
                        }
                    }
                }
            }
            () = tokio::time::sleep(hedge) => {
                launch(&mut running, &mut pending);
            }
        }
    }
    out.tried = pending.len();
    out.abandoned = pending.into_iter().flatten().collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failure_is_replaced_a_silence_is_hedged_and_enough_stops_the_rest() {
        // Candidate 1 never answers, 2 fails at once, 3 and 4 answer after 10 ms.
        let start = |c: u32| async move {
            match c {
                1 => std::future::pending::<Result<u32, &'static str>>().await,
                2 => Err("refused"),
                _ => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok(c * 10)
                }
            }
        };
        let hedge = Duration::from_millis(100);
        let g = until(vec![1, 2, 3, 4, 5], 2, hedge, start).await;
        let won: Vec<u32> = g.won.iter().map(|(c, _)| *c).collect();
        assert_eq!(
            won,
            vec![3, 4],
            "2 failed and was replaced by 3; 1's silence hedged by 4"
        );
        assert_eq!(g.failed.len(), 1);
        assert_eq!(g.tried, 4, "5 never started");
        assert_eq!(
            g.abandoned,
            vec![1],
            "the silent one was dropped, and named"
        );

        let g = until(vec![2, 2], 1, hedge, start).await;
        assert!(g.won.is_empty() && g.abandoned.is_empty());
        assert_eq!(
            (g.failed.len(), g.tried),
            (2, 2),
            "every candidate tried, then done"
        );

        let g = until(vec![3, 4], 0, hedge, start).await;
        assert_eq!(g.tried, 0);
    }
}
