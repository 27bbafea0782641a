//! Generates the etcd gRPC client from `proto/` with a vendored protoc, so building needs
//! nothing beyond cargo.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Hand the path to prost-build directly: setting PROTOC would need `unsafe` set_var.
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    // Keys and values as `Bytes`: values become objects without another copy.
    config.bytes(["."]);
    // Server traits only for the `test-util` feature: tests run fake etcd servers with them.
    let fake_servers = std::env::var_os("CARGO_FEATURE_TEST_UTIL").is_some();
    tonic_prost_build::configure()
        .build_server(fake_servers)
        .compile_with_config(config, &["proto/etcd.proto", "proto/kv.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
