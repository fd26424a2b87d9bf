# Inlet's container image: `docker build -t inlet .` (or `podman build -t inlet .`).
#
#   docker run -p 8080:8080 -v inlet-data:/var/lib/inlet \
#     -v "$PWD/inlet.toml:/etc/inlet/inlet.toml:ro" inlet
#
# Two stages: the `dist` profile built from source, then a runtime of ~40 MB on distroless
# (glibc, OpenSSL, CA certificates; no shell, no package manager), running as the
# unprivileged user 65532 with its data on the volume /var/lib/inlet.
#
# A binary built beforehand (CI builds one) replaces the first stage:
#   podman build --build-arg BINARY_STAGE=prebuilt -t inlet .
# packages target/dist/inlet (any x86_64-linux-gnu build of Inlet; see scripts/check-image).

ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
ARG BINARY_STAGE=source

FROM ${RUST_IMAGE} AS source
WORKDIR /src
# The commit `inlet --version` names (.git is not in the build context).
ARG INLET_COMMIT=unknown
ENV INLET_COMMIT=${INLET_COMMIT}
COPY . .
RUN cargo build --locked --profile dist --bin inlet \
 && install -D target/dist/inlet /out/inlet

FROM scratch AS prebuilt
COPY target/dist/inlet /out/inlet

FROM ${BINARY_STAGE} AS binary

# The data directory, owned by the runtime's user (distroless has no shell to create it).
FROM scratch AS state
COPY --chown=65532:65532 packaging/container/state/ /var/lib/inlet/

FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=binary /out/inlet /usr/bin/inlet
COPY packaging/container/inlet.toml /etc/inlet/inlet.toml
COPY --from=state --chown=65532:65532 /var/lib/inlet /var/lib/inlet
USER 65532:65532
ENV INLET_CONFIG=/etc/inlet/inlet.toml
WORKDIR /var/lib/inlet
VOLUME ["/var/lib/inlet"]
# 8080: webhooks and health; 9090: the operator surface (admin.bind in the image's
# configuration) — publish it only where operators and Prometheus reach it.
EXPOSE 8080 9090
# SIGTERM drains: requests in flight get 30 s to finish.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 \
  CMD ["/usr/bin/inlet", "healthcheck"]
ENTRYPOINT ["/usr/bin/inlet"]
CMD ["serve"]
