//! Exchanges with several candidate peers, each attempt bounded, hedged when slow: the
//! drivers of replication (`need` copies from a ranked list of members) and of reads (the
//! first owner that serves).
//!
//! Candidates are started in their ranked order. A candidate that fails is replaced at once
//! by the next; a candidate that has not answered within `hedge` gets company — the next one
//! starts beside it (the slow one keeps running, and whichever answers first counts). Every
//! attempt is bounded by the caller (its `attempt` future ends in a typed timeout), so the
//! whole exchange is bounded by the candidates' count times the attempt bound. Attempts still
//! running when enough succeeded are left to finish in the background, within their bound:
//! their outcome still tells peer health whether that peer answers (a hedged-out silent peer
//! is suspected when its attempt times out, rather than hedged again by every request),
//! and a push that completes late leaves an extra copy, which costs space, never
//! correctness.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};

/// What the exchange with one candidate gave.
pub(crate) type Outcome<C, T, E> = (C, Result<T, E>);

/// The attempts in flight.
type Running<C, T, E> =
    FuturesUnordered<Pin<Box<dyn Future<Output = Outcome<C, T, E>> + Send + 'static>>>;

/// The result of [`until`]: the successes (at most `need`) and every failure seen, in the
/// order they came.
pub(crate) struct Gathered<C, T, E> {
    /// Candidates that succeeded, with what they gave.
    pub(crate) won: Vec<(C, T)>,
    /// Candidates that failed, with why.
    pub(crate) failed: Vec<(C, E)>,
    /// Candidates started (tried).
    pub(crate) tried: usize,
}

/// Runs `start(c)` over `candidates` in order until `need` succeeded or every candidate was
/// tried: at most `need` at once plus one hedge each time `hedge` passes with nothing heard.
pub(crate) async fn until<C, T, E, F, Fut>(
    candidates: Vec<C>,
    need: usize,
    hedge: Duration,
    mut start: F,
) -> Gathered<C, T, E>
where
    C: Clone + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
    F: FnMut(C) -> Fut,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    let mut out = Gathered {
        won: Vec::new(),
        failed: Vec::new(),
        tried: 0,
    };
    if need == 0 {
        return out;
    }
    let mut queue = candidates.into_iter();
    let mut running: Running<C, T, E> = FuturesUnordered::new();
    let mut launch = |running: &mut Running<C, T, E>, out: &mut Gathered<C, T, E>| -> bool {
        let Some(c) = queue.next() else {
            return false;
        };
        out.tried += 1;
        let fut = start(c.clone());
        running.push(Box::pin(async move { (c, fut.await) }));
        true
    };
    for _ in 0..need {
        if !launch(&mut running, &mut out) {
            break;
        }
    }
    loop {
        if running.is_empty() {
            return out;
        }
        let hedge_timer = tokio::time::sleep(hedge);
        tokio::select! {
            next = running.next() => {
                let Some((c, r)) = next else { return out };
                match r {
                    Ok(t) => {
                        out.won.push((c, t));
                        if out.won.len() >= need {
                            finish_in_background(running);
                            return out;
                        }
                    }
                    Err(e) => {
                        out.failed.push((c, e));
                        // Replace the failed one, unless enough are already running.
                        if running.len() + out.won.len() < need {
                            launch(&mut running, &mut out);
                        }
                    }
                }
            }
            () = hedge_timer => {
                launch(&mut running, &mut out);
            }
        }
        // Nothing left to start and not enough running to reach `need`: the rest still may.
    }
}

/// Lets the attempts still running end on their own (each is bounded), off the caller's path.
fn finish_in_background<C, T, E>(mut running: Running<C, T, E>)
where
    C: Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    if running.is_empty() {
        return;
    }
    tokio::spawn(async move { while running.next().await.is_some() {} });
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
        let g = until(vec![1, 2, 3, 4, 5], 2, Duration::from_millis(100), start).await;
        let won: Vec<u32> = g.won.iter().map(|(c, _)| *c).collect();
        assert_eq!(won, vec![3, 4], "2 failed and was replaced by 3; 1's silence hedged by 4");
        assert_eq!(g.failed.len(), 1);
        assert_eq!(g.tried, 4, "5 never started");

        let g = until(vec![2, 2], 1, Duration::from_millis(100), start).await;
        assert!(g.won.is_empty());
        assert_eq!((g.failed.len(), g.tried), (2, 2), "every candidate tried, then done");

        let g = until(vec![3, 4], 0, Duration::from_millis(100), start).await;
        assert_eq!(g.tried, 0);
    }
}
