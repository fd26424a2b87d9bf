//! The command line's tools, not domains of their own: `inlet bench` (the load generator,
//! the database's ceiling, the evaluators' rate, a sink) and `inlet sample-app` (the
//! sample application the quickstart delivers to). They use the library as any client would.

pub mod bench;
pub mod sample_app;
