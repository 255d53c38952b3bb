//! `kvfabric`: the node binary; everything it does is in the library ([`kvfabric_node`]).

fn main() -> std::process::ExitCode {
    kvfabric_node::main_entry()
}
