pub mod command;
pub mod inject;
