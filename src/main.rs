//! The `tandem` binary: the CLI face, and the entry point of the protocol faces.

// The CLI prints on purpose; nothing else in the crate may.
#[allow(clippy::print_stdout, clippy::print_stderr)]
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
