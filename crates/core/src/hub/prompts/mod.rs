//! Prompts through the hub: the `/server:prompt` command grammar an editor's line is read
//! with (`command`), a prompt's tool calls run and injected into its text (`inject`), the
//! conventional prompts injected on the agent's behalf (`conventional`), and Tandem's own
//! prompts among them (`own`).

pub mod command;
pub mod conventional;
pub mod inject;
pub mod own;
mod vocabulary;
