//! `kvfabric node --config FILE`: run one node.
//!
//! Order of a start, each step failing the process with a one-line reason:
//! 1. load and validate the config (exit 3 naming file, key and reason);
//! 2. create the data directory, bind the HTTP listener, print
//!    `kvfabric node n<ID> listening on http://IP:PORT` on stdout;
//! 3. open the store in the background (disk recovery may take a while): `/healthz` answers at
//!    once, `/readyz` and the block routes answer 503 `not_ready` until it is open;
//! 4. with a `[cluster]` section: start the block transport, the Raft endpoint and the
//!    directory member, then join in the background (`/readyz` answers 503 until joined and
//!    caught up); a missing certificate or a port in use ends the process with exit 1;
//! 5. serve until SIGINT or SIGTERM, then drain requests in flight, stop the cluster side and
//!    exit 0.
//!
//! A store that cannot open (a locked or unreadable data directory, an unavailable GPU) ends
//! the process with exit 1.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use clap::Args;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::cluster::Cluster;
use crate::config::{self, Loaded};
use crate::http::metrics::Metrics;
use crate::http::tenancy::Tenancy;
use crate::http::{router, serve, App};
use crate::local::LocalNode;

/// Arguments of `kvfabric node`.
#[derive(Debug, Args)]
pub(crate) struct NodeArgs {
    /// The node config (TOML; see configs/node1.toml).
    #[arg(long)]
    config: PathBuf,
}

/// Runs `kvfabric node`.
pub(crate) fn run(a: NodeArgs) -> anyhow::Result<()> {
    let loaded = config::load(&a.config)?;
    crate::observe::init(&loaded.config.log_level);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("kvfabric")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(serve_node(loaded))
}

async fn serve_node(loaded: Loaded) -> anyhow::Result<()> {
    let Loaded { config, catalog } = loaded;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data_dir {}", config.data_dir.display()))?;
    let listener = TcpListener::bind(config.http_listen)
        .await
        .with_context(|| format!("binding node.http_listen {}", config.http_listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let api = format!("http://{addr}");
    println!("kvfabric node {} listening on {api}", config.node_id);
    for m in catalog.infos().iter().filter(|m| m.storable) {
        if m.block_bytes + kvfabric_store::HEADER_LEN as u64 > config.store.host_capacity.0 {
            tracing::warn!(model = %m.name, block_bytes = m.block_bytes, "blocks of this model exceed tiers.host_bytes: its puts will be refused");
        }
    }

    let tenancy = Tenancy::new(&config.namespaces, &config.tenants);
    let namespaces = tenancy.keys();
    let app = Arc::new(App {
        node_id: config.node_id,
        api: api.clone(),
        catalog,
        tenancy,
        limits: config.limits.clone(),
        metrics: Metrics::new(config.node_id),
        local: OnceLock::new(),
        inflight: Arc::new(Semaphore::new(config.limits.max_inflight_requests as usize)),
        cluster: OnceLock::new(),
        clustered: config.cluster.is_some(),
        route: config.route,
    });
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let server = {
        let router = router(app.clone());
        let limits = config.limits.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            serve::serve(listener, router, &limits, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        })
    };
    tracing::info!(node = %config.node_id, %api, config = %config.file, data_dir = %config.data_dir.display(), "serving; opening the store");

    let store_config = config.store.clone();
    let opening = tokio::task::spawn_blocking(move || LocalNode::open(store_config, &namespaces));
    let opened = tokio::select! {
        r = opening => Some(r.context("the store-opening task failed")?),
        () = signalled() => None,
    };
    let mut result = Ok(());
    match opened {
        None => {}
        Some(Err(e)) => {
            result = Err(anyhow::Error::new(e).context(format!(
                "opening the store (data_dir {})",
                config.data_dir.display()
            )));
        }
        Some(Ok((local, recovery))) => {
            let _ = app.local.set(local);
            tracing::info!(
                recovered = recovery.held,
                orphaned = recovery.orphaned,
                "store open"
            );
            if let Some(cluster_config) = config.cluster.clone() {
                match Cluster::start(
                    config.node_id,
                    cluster_config,
                    &config.data_dir,
                    app.clone(),
                )
                .await
                {
                    Ok(c) => {
                        c.run_membership(app.clone());
                        let _ = app.cluster.set(c);
                    }
                    Err(e) => result = Err(anyhow::Error::new(e).context("joining the cluster")),
                }
            }
            if result.is_ok() {
                tracing::info!("serving");
                tokio::select! {
                    () = signalled() => {},
                    _ = stop_rx.changed() => {},
                }
            }
        }
    }
    tracing::info!("shutting down");
    if let Some(c) = app.cluster.get() {
        c.shutdown().await;
    }
    let _ = stop_tx.send(true);
    server.await.context("the server task failed")?;
    result
}

/// Resolves on SIGINT or SIGTERM.
async fn signalled() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            std::future::pending::<()>().await;
            unreachable!()
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}
