//! Connections: the listener (TLS, connection cap, preface sniffing), HTTP/1.1 on hyper,
//! HTTP/2 on h2, the stamped socket I/O that times each request's wait, and the
//! connections' own hygiene (timeouts, eviction, RTT sampling).

pub mod conntrack;
pub mod http2;
pub mod hygiene;
pub mod listener;
pub mod stamp;
