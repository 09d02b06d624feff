//! One module per subcommand that has outgrown `lib.rs`.

pub mod apply;
pub mod verify;
