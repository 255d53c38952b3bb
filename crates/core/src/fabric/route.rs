//! [`Fabric::route`]: for a request's chunk keys, every candidate node scored by what serving
//! it there would cost (the cost model is [`crate::route::score`]), best first.
//!
//! Holders come from this node's replica of the directory on a cluster member (each key
//! resolved under the namespaces the caller may read, exactly as [`Fabric::lookup`] resolves
//! it, then the block's live owners with their tiers; candidates are the live members), and
//! from the local store on a standalone node (the only candidate). A key another tenant put
//! resolves to nothing, so another tenant's blocks are never counted.
//!
//! The model (block tokens and bytes) is the query's, else the one whose payload length
//! matches a block of the request held on this node (when exactly one preset has that
//! length); otherwise [`FabricError::ModelRequired`]. Bandwidths between nodes are the
//! measured ones (asked of peers when their report is older than
//! `cluster::links::LINKS_MAX_AGE_MS`), else `route.default_bandwidth_gbps`; always the
//! default when the query says `measured_links: false` (a tenant of a node with tenants:
//! the measurements move with other tenants' transfers).

use kvfabric_directory::ReadConsistency;
use kvfabric_store::{BlockId, NamespaceKey, Tier};

use super::Fabric;
use crate::cluster::directory_block;
use crate::decide::score::{self, ChunkHolders, ChunkSize, Link, Mode, NodeScore, Speeds};
use crate::error::FabricError;
use crate::ids::{ChunkKey, NodeId};
use crate::presets::Model;

/// What a route is asked about.
#[derive(Debug, Clone)]
pub struct RouteQuery<'a> {
    /// Prefix-chained chunk keys, one per chunk.
    pub keys: Vec<ChunkKey>,
    /// Position-independent keys, as many as `keys` (mode `any` only).
    pub independent: Option<Vec<ChunkKey>>,
    /// How chunks may be reused.
    pub mode: Mode,
    /// The model, when the caller named one (must be storable).
    pub model: Option<&'a Model>,
    /// Whether fetches are priced at the measured bandwidths (else at
    /// `route.default_bandwidth_gbps`): the measurements move with every tenant's transfers,
    /// so a tenant of a node with tenants is priced at the default.
    pub measured_links: bool,
}

/// The ranking of a route.
#[derive(Debug, Clone)]
pub struct RouteAnswer {
    /// The model priced.
    pub model: String,
    /// Chunks in the request.
    pub chunks: usize,
    /// Tokens per chunk.
    pub block_tokens: u32,
    /// Payload bytes per chunk.
    pub block_bytes: u64,
    /// Every candidate, best first.
    pub nodes: Vec<NodeScore>,
    /// Whether every link priced was measured (else some were the configured default).
    pub measured: bool,
}

/// Candidates, holders and resolved blocks.
type Gathered = (Vec<NodeId>, Vec<ChunkHolders>, Vec<BlockId>);

impl Fabric {
    /// Ranks the candidate nodes for `q` under the namespaces of `read`.
    pub async fn route(
        &self,
        read: &[NamespaceKey],
        q: RouteQuery<'_>,
    ) -> Result<RouteAnswer, FabricError> {
        let (candidates, holders, resolved) = match &self.cluster {
            Some(cluster) => {
                let mut holders = Vec::with_capacity(q.keys.len());
                let mut resolved = Vec::new();
                let unavailable = |e: kvfabric_directory::DirectoryError| {
                    FabricError::DirectoryUnavailable(e.to_string())
                };
                for (i, k) in q.keys.iter().enumerate() {
                    let mut c = ChunkHolders::default();
                    let local = ReadConsistency::Local;
                    let resolve = |key| cluster.resolve_chunk_at(read, key, local);
                    let holders_of = |ns, b| cluster.live_holders(&directory_block(&ns, b));
                    if let Some((ns, b)) = resolve(*k).await.map_err(unavailable)? {
                        c.prefix = holders_of(ns, b);
                        resolved.push(b);
                    }
                    if let Some(ind) = &q.independent {
                        if let Some((ns, b)) = resolve(ind[i]).await.map_err(unavailable)? {
                            c.independent = holders_of(ns, b);
                            resolved.push(b);
                        }
                    }
                    holders.push(c);
                }
                let live = cluster.live_members();
                if q.measured_links {
                    cluster.refresh_links(&live).await;
                }
                (live, holders, resolved)
            }
            None => self.standalone_holders(read, &q.keys, q.independent.as_deref())?,
        };
        let model = match q.model {
            Some(m) => m,
            None => self.infer_model(read, &resolved)?,
        };
        let size = ChunkSize {
            tokens: model.layout.block_tokens,
            bytes: model.layout.payload_len,
        };
        let cfg = &self.route;
        let speeds = Speeds {
            prefill_tokens_per_s: cfg.prefill_tokens_per_s,
            tier_read_gbps: [cfg.gpu_read_gbps, cfg.host_read_gbps, cfg.disk_read_gbps],
        };
        let cluster = self.cluster.as_ref();
        let measured = |from, to| {
            cluster
                .filter(|_| q.measured_links)
                .and_then(|c| c.bandwidth.gbps(from, to))
        };
        let link = |from: NodeId, to: NodeId| match measured(from, to) {
            Some(gbps) => Link {
                gbps,
                measured: true,
            },
            None => Link {
                gbps: cfg.default_bandwidth_gbps,
                measured: false,
            },
        };
        let ranking = score::rank(&candidates, &holders, q.mode, size, &speeds, &link);
        Ok(RouteAnswer {
            model: model.geometry.name.clone(),
            chunks: q.keys.len(),
            block_tokens: size.tokens,
            block_bytes: size.bytes,
            nodes: ranking.nodes,
            measured: ranking.measured,
        })
    }

    /// Candidates, holders and resolved blocks on a standalone node: itself and its store.
    fn standalone_holders(
        &self,
        read: &[NamespaceKey],
        keys: &[ChunkKey],
        independent: Option<&[ChunkKey]>,
    ) -> Result<Gathered, FabricError> {
        let me = self.me;
        let held = |found: Vec<Option<BlockId>>,
                    resolved: &mut Vec<BlockId>|
         -> Result<Vec<Vec<(NodeId, Tier)>>, FabricError> {
            found
                .into_iter()
                .map(|b| {
                    let Some(b) = b else { return Ok(Vec::new()) };
                    Ok(match self.local.head(read, &b)? {
                        Some((t, _)) => {
                            resolved.push(b);
                            vec![(me, t)]
                        }
                        None => Vec::new(),
                    })
                })
                .collect()
        };
        let mut resolved = Vec::new();
        let prefix = held(self.local.lookup(read, keys)?, &mut resolved)?;
        let ind = match independent {
            Some(ind) => held(self.local.lookup(read, ind)?, &mut resolved)?,
            None => vec![Vec::new(); keys.len()],
        };
        let holders = prefix
            .into_iter()
            .zip(ind)
            .map(|(prefix, independent)| ChunkHolders {
                prefix,
                independent,
            })
            .collect();
        Ok((vec![me], holders, resolved))
    }

    /// The model of the request's blocks, from the first one held here whose payload length
    /// names exactly one storable preset.
    fn infer_model(
        &self,
        read: &[NamespaceKey],
        resolved: &[BlockId],
    ) -> Result<&Model, FabricError> {
        let infos = self.catalog.infos();
        for b in resolved {
            let Some((_, len)) = self.local.head(read, b)? else {
                continue;
            };
            let mut matching = infos.iter().filter(|m| m.storable && m.block_bytes == len);
            if let (Some(m), None) = (matching.next(), matching.next()) {
                return Ok(self.catalog.lookup(&m.name)?);
            }
        }
        Err(FabricError::ModelRequired(if resolved.is_empty() {
            "no block of this request is known: name the model (`model`)".to_owned()
        } else {
            "the model of this request's blocks is not known here: name it (`model`)".to_owned()
        }))
    }
}
