//! One module per subcommand.

pub mod chat;
pub mod generate;
pub mod serve;
