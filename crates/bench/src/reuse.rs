//! `kvfabric bench reuse`: the demo's multi-agent shared-document workload sent through
//! `kvfabric router` to three `engine-sim`s (one per node of a local 3-node cluster), once per
//! policy, each on a fresh cluster: (a) round-robin, (b) prefix-only scoring over engines with
//! node-local prefix caches (today's stack), (c) kvfabric scoring over engines that read the
//! fabric by position-independent chunk key. Prints hit ratio, tokens recomputed, bytes moved,
//! time to first block per policy ([`super::reuse_report`]), and last
//! `ratio recompute_kvfabric_over_prefix <value>`; `--plot FILE` draws those figures.
//!
//! The engines and the router run as tasks in this process (the same code as the commands);
//! the nodes are processes started and stopped with `cluster up`/`cluster down`, always, also
//! on failure and on Ctrl-C, and the run checks no node is left.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use kvfabric_progress::{Progress, Unit};
use kvfabric_store::geometry::preset::builtin_preset;
use kvfabric_store::{ModelGeometry, NamespaceKey, HEADER_LEN};
use serde_json::{json, Value};

use crate::reuse_report::{PolicyRun, RequestOutcome};
use kvfabric_tools::demo::report::metric_sum;
use kvfabric_tools::demo::workload::Workload;
use kvfabric_tools::demo::{self, driver};
use kvfabric_tools::engine_sim::{self, Engine};
use kvfabric_tools::router::{self, Policy, RouterState};

/// Nodes (and engines) per run.
const NODES: usize = 3;
/// Host tier floor per node.
const HOST_BYTES_MIN: u64 = 256 << 20;
/// Host tier headroom per node beyond the workload's distinct blocks.
const HOST_BYTES_HEADROOM: u64 = 64 << 20;
/// Longest one request through the router may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Arguments of `kvfabric bench reuse`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ReuseArgs {
    /// Agents (requests), sent in agent order.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=48))]
    agents: u32,
    /// Shared documents in the pool.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=24))]
    docs: u32,
    /// Seed of the workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Requests in flight at a time.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    parallel: u32,
    /// The model preset.
    #[arg(long, default_value = engine_sim::MODEL_DEFAULT)]
    model: String,
    /// The engines' prefill rate (tokens per second of one request).
    #[arg(long, default_value_t = engine_sim::PREFILL_DEFAULT)]
    prefill_tokens_per_s: f64,
    /// Working directory (one cluster per policy under it); must be empty or absent, and is
    /// kept. Default: a fresh temporary directory, removed afterwards.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Keep the working directory.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    plot: crate::plot::PlotArg,
}

/// Runs `kvfabric bench reuse`.
pub(crate) fn run(a: ReuseArgs) -> anyhow::Result<()> {
    let g = builtin_preset(&a.model)
        .with_context(|| format!("--model: no embedded preset {:?}", a.model))?;
    anyhow::ensure!(
        a.prefill_tokens_per_s.is_finite() && a.prefill_tokens_per_s > 0.0,
        "--prefill-tokens-per-s: expected a positive number"
    );
    a.plot.check()?;
    let stop = Arc::new(AtomicBool::new(false));
    demo::watch_signals(Arc::clone(&stop))?;
    let (dir, temporary) = demo::prepare_dir(a.dir.as_deref())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let ns = NamespaceKey::derive(kvfabric_core::OPEN_NAMESPACE);
    let w = Workload::new(
        a.seed,
        a.agents as usize,
        a.docs as usize,
        NODES,
        g.block_tokens() as usize,
    );
    let distinct = driver::distinct_keys(&g, &ns, &w.agents).len() as u64;
    println!(
        "kvfabric bench reuse: {} agents, {} shared documents, {} distinct chunks of {} tokens \
         ({}), prefill {} tokens/s, {} requests at a time; a fresh 3-node cluster per policy",
        a.agents,
        a.docs,
        distinct,
        g.block_tokens(),
        g.name,
        a.prefill_tokens_per_s,
        a.parallel
    );
    let mut runs = Vec::new();
    let mut failure = None;
    for policy in [Policy::RoundRobin, Policy::Prefix, Policy::Kvfabric] {
        if stop.load(Ordering::SeqCst) {
            failure = Some(anyhow::anyhow!("interrupted"));
            break;
        }
        let sub = dir.join(policy.as_str());
        let result = std::fs::create_dir_all(&sub)
            .with_context(|| format!("creating {}", sub.display()))
            .and_then(|()| run_policy(&rt, &a, &g, &w, distinct, &sub, policy, &stop));
        let down = demo::cluster_command(&sub, "down", &["--grace-s", "10"])
            .and_then(|()| demo::none_running(&sub));
        match (result, down) {
            (Ok(r), Ok(())) => runs.push(r),
            (Err(e), _) => {
                failure = Some(e.context(format!("policy {}", policy.as_str())));
                break;
            }
            (Ok(_), Err(d)) => {
                failure = Some(d.context(format!("stopping the {} cluster", policy.as_str())));
                break;
            }
        }
    }
    rt.shutdown_timeout(Duration::from_secs(5));
    let interrupted = stop.load(Ordering::SeqCst);
    if (failure.is_none() || interrupted) && temporary && !a.keep {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    } else {
        println!("files kept in {}", dir.display());
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let mismatches: u64 = runs
        .iter()
        .flat_map(|r| &r.requests)
        .map(|o| o.mismatches)
        .sum();
    print!("{}", crate::reuse_report::render(&runs));
    if mismatches > 0 {
        bail!("{mismatches} blocks read differed from the engine's bytes");
    }
    let title = format!(
        "kvfabric bench reuse: {} agents, {} documents, {}, prefill {} tokens/s",
        a.agents, a.docs, g.name, a.prefill_tokens_per_s
    );
    a.plot.write_bars(&title, &crate::reuse_report::bars(&runs))
}

/// One policy on a fresh cluster under `dir`; the caller stops the cluster.
#[allow(clippy::too_many_arguments)]
fn run_policy(
    rt: &tokio::runtime::Runtime,
    a: &ReuseArgs,
    g: &ModelGeometry,
    w: &Workload,
    distinct: u64,
    dir: &Path,
    policy: Policy,
    stop: &AtomicBool,
) -> anyhow::Result<PolicyRun> {
    let block = g.block_layout().payload_len + HEADER_LEN as u64;
    let host_mib = (distinct * block + HOST_BYTES_HEADROOM)
        .max(HOST_BYTES_MIN)
        .div_ceil(1 << 20);
    eprintln!(
        "bench reuse: {}: starting 3 nodes in {}",
        policy.as_str(),
        dir.display()
    );
    demo::cluster_up(dir, host_mib, "120")?;
    let urls = demo::node_urls(dir)?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let shutdown = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let mut tasks = Vec::new();
    let mut backends = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let engine = Arc::new(Engine::new(
            url,
            None,
            &g.name,
            kvfabric_core::OPEN_NAMESPACE,
            a.prefill_tokens_per_s,
        )?);
        let (addr, task) = rt.block_on(engine_sim::spawn_local(engine, shutdown(rx.clone())))?;
        tasks.push(task);
        backends.push((format!("n{}", i + 1), format!("http://{addr}")));
    }
    let state = Arc::new(RouterState::new(
        backends,
        &urls[0],
        None,
        policy,
        &g.name,
        kvfabric_core::OPEN_NAMESPACE,
    )?);
    let (router_addr, task) = rt.block_on(router::spawn_local(state, shutdown(rx.clone())))?;
    tasks.push(task);
    let outcome = send_all(
        &format!("http://{router_addr}"),
        w,
        a.parallel as usize,
        stop,
        &format!("bench reuse {}", policy.as_str()),
    );
    let _ = tx.send(true);
    for t in tasks {
        match rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), t).await }) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "a bench server failed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "a bench server panicked"),
            Err(_) => tracing::warn!("a bench server did not stop within 30 s"),
        }
    }
    let requests = outcome?;
    let mut transport_bytes = 0;
    for n in demo::node_apis(dir)? {
        let text = driver::metrics(&n)?;
        transport_bytes += metric_sum(&text, "kvfabric_transport", Some("stat=\"bytes_in\""));
    }
    Ok(PolicyRun {
        policy,
        requests,
        transport_bytes,
    })
}

/// Sends every agent's prompt through the router, `parallel` at a time, in agent order, with
/// a bar named `what` (on a terminal) and a line per request on stderr.
fn send_all(
    router: &str,
    w: &Workload,
    parallel: usize,
    stop: &AtomicBool,
    what: &str,
) -> anyhow::Result<Vec<RequestOutcome>> {
    let bar = Progress::new(what, w.agents.len() as u64, Unit::Items("requests"));
    let bar = &bar;
    let agent: ureq::Agent = kvfabric_http_client::agent(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build(),
    );
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<RequestOutcome>>>> =
        Mutex::new((0..w.agents.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..parallel.clamp(1, w.agents.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= w.agents.len() || stop.load(Ordering::SeqCst) {
                    return;
                }
                let r = send_one(&agent, router, i, &w.agents[i].tokens, bar);
                bar.inc(1);
                let failed = r.is_err();
                results.lock().expect("not poisoned")[i] = Some(r);
                if failed {
                    stop.store(true, Ordering::SeqCst);
                }
            });
        }
    });
    bar.finish();
    let results = results.into_inner().expect("not poisoned");
    let mut out = Vec::with_capacity(results.len());
    let mut unsent = false;
    for r in results {
        match r {
            Some(r) => out.push(r?),
            None => unsent = true,
        }
    }
    if unsent {
        bail!("interrupted");
    }
    Ok(out)
}

fn send_one(
    agent: &ureq::Agent,
    router: &str,
    i: usize,
    tokens: &[u32],
    bar: &Progress,
) -> anyhow::Result<RequestOutcome> {
    let body = json!({ "tokens": tokens, "request_id": format!("agent-{i:02}") });
    let mut resp = agent
        .post(format!("{router}/v1/generate"))
        .header("content-type", "application/json")
        .send(serde_json::to_vec(&body)?.as_slice())
        .with_context(|| format!("agent {i:02}: POST {router}/v1/generate"))?;
    let status = resp.status().as_u16();
    let bytes = resp
        .body_mut()
        .with_config()
        .limit(4 << 20)
        .read_to_vec()
        .with_context(|| format!("agent {i:02}: reading the router's answer"))?;
    let v: Value = serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "agent {i:02}: router answered {status}, not JSON: {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    if status != 200 {
        bail!("agent {i:02}: router answered {status}: {v}");
    }
    let num = |k: &str| {
        v.get(k)
            .and_then(Value::as_f64)
            .with_context(|| format!("agent {i:02}: answer without {k}: {v}"))
    };
    let o = RequestOutcome {
        routed_to: v
            .get("routed_to")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned(),
        chunks: num("chunks")? as u64,
        hits: (num("hits_local")? + num("hits_remote")?) as u64,
        recomputed_tokens: num("recomputed_tokens")? as u64,
        bytes_fetched: num("bytes_fetched")? as u64,
        mismatches: num("mismatches")? as u64,
        ttfb_ms: num("time_to_first_block_ms")?
            + v.pointer("/route/route_ms")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
    };
    bar.line(format!(
        "  agent {i:02} -> {}: {} chunks, {} hits, {} tokens recomputed, first block {:.1} ms",
        o.routed_to, o.chunks, o.hits, o.recomputed_tokens, o.ttfb_ms
    ));
    Ok(o)
}
