//! Test servers and fakes shared by the integration tests. Every server binds 127.0.0.1 only.
#![allow(dead_code)]
