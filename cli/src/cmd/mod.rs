//! One module per subcommand.

pub mod bench;
pub mod chat;
pub mod chat_session;
pub mod generate;
pub mod needle;
pub mod plan;
pub mod ppl;
pub mod serve;
