//! One module per subcommand; `lib.rs` keeps what they share (loading
//! the mesh, finding workloads, computing recommendations).

pub mod apply;
pub mod audit;
pub mod codes;
pub mod diff;
pub mod explain;
pub mod impact;
pub mod recommend;
pub mod verify;
pub mod version;
