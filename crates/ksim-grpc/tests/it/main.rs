//! The serving runtime over real sockets: one test binary, a module per area.
//! - `serve`: health, reflection, TLS, limits, the admin port, shutdown.
//! - `trace_context`: W3C trace-context continued across a real gRPC call.

mod serve;
mod trace_context;
