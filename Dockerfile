# weir in an image built FROM scratch around a statically linked binary (no base image
# is pulled). Build the binaries first:
#   RUSTFLAGS="-C target-feature=+crt-static" cargo build --release \
#     --target x86_64-unknown-linux-gnu --bin weir --bin loadgen
# then `docker compose build` (or `docker-compose build`).
FROM scratch
COPY target/x86_64-unknown-linux-gnu/release/weir /weir
COPY target/x86_64-unknown-linux-gnu/release/loadgen /loadgen
COPY config /config
WORKDIR /var/lib/weir
ENTRYPOINT ["/weir"]
CMD ["--config", "/config/weir.yaml"]
