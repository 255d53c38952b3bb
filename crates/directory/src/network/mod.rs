//! The seam between Raft and whatever carries bytes between members.
//!
//! openraft talks to [`FramedNetworkFactory`], which turns every RPC into one request frame
//! ([`codec`](crate::codec)) and hands it to a [`FrameTransport`]; the callee's [`RpcServer`]
//! decodes it, runs it against its Raft member and returns one response frame. A transport only
//! moves opaque frames, so the in-memory router used by tests ([`InMemoryRouter`], with its
//! partitions, drops and delays) and a transport between processes are interchangeable without
//! touching Raft or the state machine.
//!
//! Plugging in a real transport (QUIC with the cluster's mTLS) means implementing
//! [`FrameTransport::call`] as "open a bidirectional stream to `addr`, write the frame, read one
//! response frame" (see [`codec::write_frame`](crate::codec::write_frame) and
//! [`codec::read_frame`](crate::codec::read_frame)), and on the accepting side feeding each
//! request frame to [`RpcServer::handle_frame`].

mod framed;
mod memory;
pub(crate) mod server;

use std::future::Future;
use std::pin::Pin;

pub use framed::{FramedNetwork, FramedNetworkFactory};
pub use memory::{InMemoryRouter, RouterStats};
pub use server::RpcServer;

use crate::error::DirectoryError;
use crate::ids::NodeId;

/// A boxed, sendable future (keeps [`FrameTransport`] object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Carries one request frame to a member and brings back its one response frame.
///
/// Implementations must bound every call (the caller also wraps it in a timeout) and report a
/// member they cannot reach as [`DirectoryError::Unreachable`], which makes Raft back off.
pub trait FrameTransport: Send + Sync + 'static {
    /// Sends `frame` from member `from` to member `to`, reachable at `addr`.
    fn call<'a>(
        &'a self,
        from: NodeId,
        to: NodeId,
        addr: &'a str,
        frame: Vec<u8>,
    ) -> BoxFuture<'a, Result<Vec<u8>, DirectoryError>>;
}
