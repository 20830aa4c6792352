//! The status manager's pure logic.

pub mod generate;

pub use generate::*;
