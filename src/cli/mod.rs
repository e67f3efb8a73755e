//! Command-line parsing. Each subcommand lives in its own file and is thin: it parses options,
//! calls the library, and prints.

mod entry;
mod kernel;
mod lab;
mod progress;
mod reproduce;
mod signals;
mod theory;
mod train;
mod validate;

pub use entry::main;
