//! Both servers over TLS (rustls), including mutual TLS on gRPC.

mod support;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use support::pki::pki;
use support::*;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

#[tokio::test]
async fn http_and_grpc_over_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let p = pki();
    let dir = tempfile::tempdir().unwrap();
    let w = |name: &str, content: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    };
    let (cert, key, ca) = (w("server.pem", &p.server_cert), w("server.key", &p.server_key), w("ca.pem", &p.ca_pem));
    let yaml = base_yaml(std::path::Path::new("{dir}"), "")
        .replacen("  grpc_server:\n", &format!("    tls: {{cert_file: \"{cert}\", key_file: \"{key}\"}}\n  grpc_server:\n"), 1)
        .replacen(
            "\npipeline:",
            &format!("    tls: {{cert_file: \"{cert}\", key_file: \"{key}\", client_ca_file: \"{ca}\"}}\npipeline:"),
            1,
        );
    let weir = start_yaml(&yaml).await;
    let http_port = weir.app.http_addr.unwrap().port();
    let grpc_port = weir.app.grpc_addr.unwrap().port();

    // HTTP over TLS with the CA trusted.
    let client =
        reqwest::Client::builder().add_root_certificate(reqwest::Certificate::from_pem(p.ca_pem.as_bytes()).unwrap()).build().unwrap();
    let body = prost::Message::encode_to_vec(&traces("tls-http", 2, 1));
    let r = client
        .post(format!("https://localhost:{http_port}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Plain HTTP against the TLS port fails.
    assert!(reqwest::Client::new()
        .post(format!("http://localhost:{http_port}/v1/traces"))
        .body(body)
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true));

    // gRPC over mutual TLS.
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&p.ca_pem))
        .domain_name("localhost")
        .identity(Identity::from_pem(&p.client_cert, &p.client_key));
    let ch = tonic::transport::Channel::from_shared(format!("https://localhost:{grpc_port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    TraceServiceClient::new(ch).export(traces("tls-grpc", 3, 1)).await.expect("mTLS export");

    // Without a client certificate the handshake is refused.
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&p.ca_pem)).domain_name("localhost");
    let no_cert = async {
        tonic::transport::Channel::from_shared(format!("https://localhost:{grpc_port}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .ok()?
            .ready_for_export()
            .await
    };
    assert!(no_cert.await.is_none(), "a client without a certificate must be refused");

    assert_eq!(wait_items(&weir.data_dir(), "traces", 5).await.len(), 5);
    weir.app.shutdown().await;
}

trait Ready {
    async fn ready_for_export(self) -> Option<()>;
}

impl Ready for tonic::transport::Channel {
    async fn ready_for_export(self) -> Option<()> {
        TraceServiceClient::new(self).export(traces("nocert", 1, 1)).await.ok().map(|_| ())
    }
}
