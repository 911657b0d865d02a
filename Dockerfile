# weir in an image built FROM scratch around a statically linked binary (no base image
# is pulled). Build it with `scripts/image.sh`, which makes the static binaries first.
FROM scratch
ARG PROFILE=release
COPY target/x86_64-unknown-linux-gnu/${PROFILE}/weir /weir
COPY target/x86_64-unknown-linux-gnu/${PROFILE}/loadgen /loadgen
COPY config /config
WORKDIR /var/lib/weir
ENTRYPOINT ["/weir"]
CMD ["--config", "/config/weir.yaml"]
