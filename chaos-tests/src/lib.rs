//! kvfabric's chaos and partition harness (issue 7): real node processes in network
//! namespaces under faults, and a checker over the recorded history. Not implemented yet; the
//! crate fixes its place in the workspace.
