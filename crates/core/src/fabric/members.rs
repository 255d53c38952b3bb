//! [`Fabric::add_member`] and [`Fabric::remove_member`]: live membership changes, coordinated
//! by this node (see `cluster::reconfig`); a standalone node has no membership to change.

use super::Fabric;
use crate::cluster::reconfig::{ReconfigError, Reconfigured};
use crate::config::Member;
use crate::error::FabricError;
use crate::ids::NodeId;

impl From<ReconfigError> for FabricError {
    fn from(e: ReconfigError) -> FabricError {
        match e {
            ReconfigError::Refused(m) => FabricError::MembershipRefused(m),
            e @ ReconfigError::Incomplete { .. } => {
                FabricError::MembershipIncomplete(e.to_string())
            }
        }
    }
}

impl Fabric {
    fn standalone_refusal() -> FabricError {
        FabricError::MembershipRefused("a standalone node has no cluster membership".into())
    }

    /// Adds member `m` (its node running, its config naming the others): a learner, caught
    /// up, a voter. Done when `m` votes.
    pub async fn add_member(&self, m: Member) -> Result<Reconfigured, FabricError> {
        let c = self.cluster.as_ref().ok_or_else(Self::standalone_refusal)?;
        Ok(c.add_member(m).await?)
    }

    /// Removes member `id` (not this node): a learner, drained, out of the group. Done when
    /// it has left; its process is the caller's to stop.
    pub async fn remove_member(&self, id: NodeId) -> Result<Reconfigured, FabricError> {
        let c = self.cluster.as_ref().ok_or_else(Self::standalone_refusal)?;
        Ok(c.remove_member(id).await?)
    }
}
