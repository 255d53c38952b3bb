//! The miss path does the same work whatever another tenant holds (issue 18, item 2), measured
//! on a real 3-node cluster (debug build, as `cargo test` builds it; one copy per put).
//!
//! Tenant `a` puts blocks on n1, so n1 holds them and n2's directory replica knows them under
//! `a`'s namespace. Tenant `b` then asks for them (*other*) and for ids nobody put (*absent*),
//! interleaved one for one in alternating order, on the holder n1 and on the non-holder n2.
//! Both must be the same 404 with the same body, and the difference of the two medians must
//! stay below a bound measured from the same run's noise:
//!
//! - a median of `n` samples has a standard error of about `1.253 σ / √n`, σ estimated robustly
//!   as `IQR / 1.349`; the difference of two independent medians `√2` times that. Without a
//!   leak the difference is that noise: below 6 standard errors but for a chance of ~1e-9;
//! - the *absent* samples are split into their even and odd halves, two sets of the same case
//!   taken interleaved: three times their difference covers drift the model does not (load
//!   from other processes changing during the run);
//! - a floor of 50 µs (the scheduler's and the clock's granularity under load).
//!
//! The bound must itself be far below the gap the issue measured (1.2 ms at least): when the
//! machine is so noisy that it is not below 500 µs, the round is repeated with twice the
//! samples (four rounds at most), never loosened. The test shows its power against leaky paths
//! measured in the same run, which it must tell apart: on n1 a real hit of `a` on its own block
//! (what a store read costs), on n2 `a`'s first read of each of its blocks (the remote fetch the
//! old miss path made for another tenant's id). Every figure is printed.

mod cluster_harness;

use std::time::Instant;

use cluster_harness::{bearer, tenanted, Cluster, TENANT_A, TENANT_B};
use kvfabric_test_support::presets::{builtin, payload};

const MODEL: &str = "deepseek-v2-lite";
/// Blocks `a` puts (the *other* samples cycle over them).
const BLOCKS: u64 = 24;
/// Samples of each case in the first round (doubled each further round).
const SAMPLES: usize = 400;
const ROUNDS_MAX: u32 = 4;
const FLOOR_US: f64 = 50.0;
/// The largest bound that still says something: well under half the smallest gap the issue
/// measured (1.2 ms).
const BOUND_MAX_US: f64 = 500.0;

fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((s.len() - 1) as f64 * q).round() as usize;
    s[i]
}

/// The standard error of the median of `v` (robust σ from the IQR).
fn median_se(v: &[f64]) -> f64 {
    let sigma = (quantile(v, 0.75) - quantile(v, 0.25)) / 1.349;
    1.253 * sigma / (v.len() as f64).sqrt()
}

/// A GET of block `id` on node `n` with `token`: its status, body and duration in µs.
fn timed_get(c: &Cluster, n: u64, token: &str, id: &str) -> (u16, Vec<u8>, f64) {
    let (k, v) = bearer(token);
    let path = format!("/v1/blocks/{id}");
    let t = Instant::now();
    let r = c
        .call(n, "GET", &path, &[(k, &v)], None)
        .unwrap_or_else(|| panic!("n{n} did not answer GET {id}"));
    let us = t.elapsed().as_secs_f64() * 1e6;
    (r.status, r.body, us)
}

/// An id nobody put, different for every `i`.
fn absent_id(i: u64) -> String {
    let h = blake3::hash(&i.to_le_bytes());
    h.to_hex().to_string()
}

struct Verdict {
    other: f64,
    absent: f64,
    bound: f64,
}

/// Interleaved samples of both cases on node `n`, `samples` each.
fn round(c: &Cluster, n: u64, ids: &[String], samples: usize, salt: u64) -> Verdict {
    let (mut other, mut absent) = (Vec::new(), Vec::new());
    let mut bodies = std::collections::BTreeSet::new();
    for i in 0..samples {
        let id = &ids[i % ids.len()];
        let gone = absent_id(salt + i as u64);
        let first_other = i % 2 == 0;
        for which in [first_other, !first_other] {
            let (status, body, us) = if which {
                timed_get(c, n, TENANT_B, id)
            } else {
                timed_get(c, n, TENANT_B, &gone)
            };
            assert_eq!(status, 404, "n{n}: b's GET of an id it may not read");
            // The body names no id: one body for both cases.
            bodies.insert(body);
            if which {
                other.push(us);
            } else {
                absent.push(us);
            }
        }
    }
    assert_eq!(bodies.len(), 1, "n{n}: one 404 body for both cases");
    let (mut even, mut odd) = (Vec::new(), Vec::new());
    for (i, us) in absent.iter().enumerate() {
        if i % 2 == 0 {
            even.push(*us);
        } else {
            odd.push(*us);
        }
    }
    let se = (median_se(&other).powi(2) + median_se(&absent).powi(2)).sqrt();
    let aa = (median(&even) - median(&odd)).abs();
    let bound = (6.0 * se).max(3.0 * aa).max(FLOOR_US);
    println!(
        "n{n}: {samples} samples each: median other {:.1} µs, absent {:.1} µs; \
         se of the difference {se:.1} µs, A/A difference {aa:.1} µs, bound {bound:.1} µs",
        median(&other),
        median(&absent)
    );
    Verdict {
        other: median(&other),
        absent: median(&absent),
        bound,
    }
}

/// Rounds until the bound is tight enough; returns the last verdict.
fn measure(c: &Cluster, n: u64, ids: &[String]) -> Verdict {
    let mut samples = SAMPLES;
    for r in 0..ROUNDS_MAX {
        let v = round(c, n, ids, samples, (n << 40) + (u64::from(r) << 32));
        if v.bound <= BOUND_MAX_US {
            return v;
        }
        samples *= 2;
    }
    panic!("n{n}: the noise never allowed a bound under {BOUND_MAX_US} µs");
}

/// Median gap of `leaky` samples (µs) over interleaved absent ones on node `n`.
fn leaky_gap(c: &Cluster, n: u64, mut leaky: impl FnMut(usize) -> f64, samples: usize) -> f64 {
    let (mut hit, mut absent) = (Vec::new(), Vec::new());
    for i in 0..samples {
        hit.push(leaky(i));
        absent.push(timed_get(c, n, TENANT_B, &absent_id((9 << 40) + (n << 32) + i as u64)).2);
    }
    median(&hit) - median(&absent)
}

#[test]
fn another_tenants_id_misses_in_the_time_an_absent_id_does_on_a_holder_and_a_non_holder() {
    let c = tenanted(3, &["--replication", "1"]);
    let g = builtin(MODEL);
    let (k, v) = bearer(TENANT_A);
    let ids: Vec<String> = (0..BLOCKS)
        .map(|seed| {
            let r = c.put_block(1, &g, &payload(&g, seed), &[(k, &v)]);
            assert_eq!(r.status, 201, "{}", r.text());
            r.json()["block"].as_str().unwrap().to_owned()
        })
        .collect();
    // n2's directory replica knows every block's owner (under a's namespace) before b asks.
    for id in &ids {
        c.wait_for("n2 to know n1 holds a's block", || {
            let (s, _, _) = timed_get(&c, 2, TENANT_A, id);
            (s == 200).then_some(())
        });
    }
    // That read made n2 a holder of every block: back to one holder, n1.
    for id in &ids {
        let r = c
            .call(2, "DELETE", &format!("/v1/blocks/{id}"), &[(k, &v)], None)
            .unwrap();
        assert_eq!(r.status, 204, "{}", r.text());
    }
    for id in &ids {
        assert_eq!(timed_get(&c, 1, TENANT_A, id).0, 200, "n1 still holds it");
        let on_n2 = c
            .call(2, "HEAD", &format!("/v1/blocks/{id}"), &[(k, &v)], None)
            .unwrap();
        // HEAD answers as GET would: from n1 now, never from a copy of n2's own.
        assert_ne!(
            on_n2.header("kvfabric-source"),
            Some("local"),
            "n2 dropped its copy"
        );
    }

    for n in [1, 2] {
        let v = measure(&c, n, &ids);
        let diff = (v.other - v.absent).abs();
        println!("ratio miss_other_minus_absent_us_n{n} {diff:.1}");
        assert!(
            diff <= v.bound,
            "n{n}: another tenant's id took {:.1} µs (median), an absent id {:.1} µs: a \
             difference of {diff:.1} µs, above the noise bound {:.1} µs",
            v.other,
            v.absent,
            v.bound
        );
    }

    // The power: leaky paths measured now are far outside the bound.
    let hit = leaky_gap(
        &c,
        1,
        |i| timed_get(&c, 1, TENANT_A, &ids[i % ids.len()]).2,
        200,
    );
    println!("ratio leaky_hit_minus_absent_us_n1 {hit:.1}");
    let fetch = leaky_gap(&c, 2, |i| timed_get(&c, 2, TENANT_A, &ids[i]).2, ids.len());
    println!("ratio leaky_fetch_minus_absent_us_n2 {fetch:.1}");
    assert!(
        fetch > BOUND_MAX_US,
        "a remote fetch took only {fetch:.1} µs more than a miss: the bound would not show it"
    );
}
