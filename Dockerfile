# Image of admit, referenced by charts/admit (image.repository / image.tag, default tag = the chart's appVersion).
#   docker build -t admit:dev .      (a release: hack/build-image.sh, as .github/workflows/release.yml runs it)
# Two stages: the builder installs admit and its dependencies into a virtualenv; the runtime stage copies only
# that virtualenv (no pip cache, no build tools, no sources) and runs as a non-root user.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY admit ./admit
# The "fast" extra adds orjson (faster JSON for AdmissionReview bodies). DL3013 asks for pinned versions: this
# installs the project itself, whose dependency ranges live in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[fast]" \
    && python -m compileall -q /opt/venv

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="admit" \
      org.opencontainers.image.description="Admission webhook for gang scheduling with scheduler-plugins Coscheduling" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/admit-dev/admit"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /opt/venv /opt/venv
# 65532: the conventional "nonroot" uid/gid; the chart runs the pod with the same ids, runAsNonRoot and a
# read-only root filesystem (only /tmp is writable, an emptyDir).
USER 65532:65532
WORKDIR /tmp
# 8443: the webhook (HTTPS); 8080: GET /metrics (plain HTTP) when served with --metrics-port 8080, as the chart does
# (on 127.0.0.1 unless metrics.access says otherwise)
EXPOSE 8443 8080
ENTRYPOINT ["admit"]
CMD ["serve"]
