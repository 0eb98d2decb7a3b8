//! One module per subcommand.

pub mod bench;
pub mod chat;
pub mod generate;
pub mod needle;
pub mod ppl;
pub mod serve;
