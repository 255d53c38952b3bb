//! `kvfabric node --config FILE`: run one node.
//!
//! Order of a start, each step failing the process with a one-line reason:
//! 1. load and validate the config (exit 3 naming file, key and reason), then the namespace
//!    secret (`node.namespace_secret`; generated on the first start of a standalone node or a
//!    development cluster, otherwise a missing or malformed file ends the process, exit 1);
//! 2. create the data directory, bind the HTTP listener, print
//!    `kvfabric node n<ID> listening on http://IP:PORT` on stdout;
//! 3. advance the event epoch (`data_dir/events.epoch`) and bind the configured ZeroMQ event
//!    sockets (an unreadable epoch file or a port in use ends the process with exit 1);
//! 4. open the store in the background (disk recovery may take a while): `/healthz` answers at
//!    once, `/readyz` and the block routes answer 503 `not_ready` until it is open;
//!    once open, announce the epoch and what was recovered on the event stream;
//! 5. with a `[cluster]` section: start the block transport, the Raft endpoint and the
//!    directory member, then join in the background (`/readyz` answers 503 until joined and
//!    caught up); a missing certificate or a port in use ends the process with exit 1;
//! 6. serve until SIGINT or SIGTERM, then drain requests in flight, stop the cluster side and
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

use kvfabric_core::events::cluster::ClusterFeed;
use kvfabric_core::events::{self, EventLog};
use kvfabric_core::local::LocalNode;
use kvfabric_core::{Fabric, FabricParts, SystemClock};

use crate::config::{self, Loaded};
use crate::http::metrics::Metrics;
use crate::http::operator::Operator;
use crate::http::tenancy::Tenancy;
use crate::http::{router, serve, App};

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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(loaded.config.worker_threads)
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

    let secrets = load_secrets(&config.namespace_secret)?;
    let tenancy = Tenancy::new(&config.namespaces, &config.tenants, &secrets);
    let operator = Operator::new(config.operator.as_ref(), tenancy.is_open());
    let namespaces = tenancy.keys();
    let metrics = Metrics::new(config.node_id);
    let epoch = events::epoch::next_epoch(&config.data_dir).context("advancing the event epoch")?;
    let event_log = Arc::new(EventLog::new(
        config.node_id,
        epoch,
        config.events.ring_batches,
        metrics.events.clone(),
    ));
    let feed = config
        .events
        .cluster_feed
        .then(|| Arc::new(ClusterFeed::new(config.node_id, config.events.ring_batches)));
    let feed_task = feed.as_ref().map(|f| f.follow(event_log.clone()));
    let zmq = crate::zmq::start(event_log.clone(), feed.clone(), &config.events).await?;
    let catalog = Arc::new(catalog);
    let app = Arc::new(App {
        node_id: config.node_id,
        api: api.clone(),
        catalog: catalog.clone(),
        tenancy,
        operator,
        limits: config.limits.clone(),
        metrics,
        fabric: OnceLock::new(),
        inflight: Arc::new(Semaphore::new(config.limits.max_inflight_requests as usize)),
        events: event_log.clone(),
        feed: feed.clone(),
        sse_slots: Arc::new(Semaphore::new(config.events.max_sse_subscribers as usize)),
        sse_max: config.events.max_sse_subscribers,
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
    let data_dir = config.data_dir.clone();
    let opening = tokio::task::spawn_blocking(move || {
        LocalNode::open_in(store_config, &namespaces, Some(&data_dir))
    });
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
            match local.attach_events(event_log.clone()) {
                Ok(()) => tracing::info!(epoch, "events: epoch announced"),
                Err(e) => tracing::error!(error = %e, "announcing the event epoch failed"),
            }
            tracing::info!(
                recovered = recovery.held,
                orphaned = recovery.orphaned,
                "store open"
            );
            if recovery.orphaned > 0 {
                tracing::warn!(orphaned = recovery.orphaned, "blocks on disk under a namespace key this node does not have (a retired secret or a removed namespace) were released: they are never served");
            }
            app.metrics.orphaned.inc_by(recovery.orphaned);
            let local = Arc::new(local);
            let scrub = config.scrub.map(|c| {
                tracing::info!(
                    bytes_per_s = c.bytes_per_s,
                    pause_ms = c.pause.as_millis() as u64,
                    "disk scrub on"
                );
                tokio::spawn(kvfabric_core::local::scrub::run(local.clone(), c))
            });
            let parts = FabricParts {
                me: config.node_id,
                api: api.clone(),
                catalog,
                route: config.route,
                clock: Arc::new(SystemClock),
                local,
                events: event_log.clone(),
                feed: feed.clone(),
                arenas: config.arenas,
            };
            let fabric = match config.cluster.clone() {
                None => Ok(Fabric::standalone(parts)),
                Some(c) => Fabric::start_member(parts, c, &config.data_dir)
                    .await
                    .map_err(|e| anyhow::Error::new(e).context("joining the cluster")),
            };
            match fabric {
                Ok(f) => {
                    let _ = app.fabric.set(Arc::new(f));
                }
                Err(e) => result = Err(e),
            }
            if result.is_ok() {
                tracing::info!("serving");
                tokio::select! {
                    () = signalled() => {},
                    _ = stop_rx.changed() => {},
                }
            }
            if let Some(t) = scrub {
                t.abort();
            }
        }
    }
    tracing::info!("shutting down");
    event_log.close();
    if let Some(f) = &feed {
        f.close();
    }
    if let Some(t) = feed_task {
        t.abort();
    }
    if let Some(z) = &zmq {
        z.abort();
    }
    if let Some(f) = app.fabric.get() {
        f.shutdown().await;
    }
    let _ = stop_tx.send(true);
    server.await.context("the server task failed")?;
    result
}

/// The namespace secrets of `source`, generated first where the config allows it.
fn load_secrets(source: &config::SecretSource) -> anyhow::Result<kvfabric_core::secret::Secrets> {
    let path = &source.path;
    let secrets = if source.create {
        let (s, created) = kvfabric_core::secret::ensure(path)?;
        if created {
            tracing::warn!(file = %path.display(), "generated a namespace secret (first start): keep it with the node's data");
        }
        s
    } else if !path.exists() {
        anyhow::bail!(
            "the namespace secret file {} does not exist: write it with `kvfabric certs --out DIR` (beside the certificates) and copy it to every member",
            path.display()
        );
    } else {
        kvfabric_core::secret::Secrets::load(path)?
    };
    tracing::info!(
        file = %path.display(),
        current = %secrets.current.id(),
        readable = secrets.readable().len(),
        "namespace secret loaded"
    );
    Ok(secrets)
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
