//! gRPC health probes (upstream `pkg/probe/grpc`). TO BE WRITTEN.
