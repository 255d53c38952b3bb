//! Route scoring (`POST /v1/route`): which node would serve a request's chunks cheapest.
//!
//! [`score`] is the pure cost model and ranking (no I/O), [`bandwidth`] the node-to-node
//! bandwidths it prices fetches with (measured on every fetch, shared between members). The
//! HTTP handler (`http::routes::route`) gathers each chunk's holders (from the directory
//! replica on a cluster node, from the local store on a standalone one) under the namespaces
//! the caller may read, and renders the ranking.

pub mod bandwidth;
pub mod score;
