# Image of admit, referenced by charts/admit (image.repository / image.tag, default tag = the chart's appVersion).
#   docker build -t admit:dev .      (a release: hack/build-image.sh, as .github/workflows/release.yml runs it)
# Two stages: the builder installs admit and its dependencies into a virtualenv; the runtime stage copies only
# that virtualenv (no pip cache, no build tools, no sources) and runs as a non-root user.
#
# Reproducible: one commit gives the same image layers, whenever it is built (hack/build-image.sh
# REPRODUCIBLE=check builds it twice and compares):
#   - the base image is pinned by digest: the multi-platform index of the official python:3.11-slim (Python 3.11.15,
#     Debian trixie) as docker-library/repo-info lists it in repos/python/remote/3.11-slim.md. To refresh it:
#     `docker buildx imagetools inspect python:3.11-slim` (the "Digest:" line of the index, not a platform's), or
#     that file's first `docker pull python@sha256:...` line; then rebuild and run the tests;
#   - every dependency comes from requirements.lock, exact versions with the hashes of their files (pip
#     --require-hashes refuses anything else), setuptools and wheel for building admit included; regenerate it
#     after a change to pyproject.toml's dependencies with the command at its top (pip-tools' pip-compile);
#   - SOURCE_DATE_EPOCH (a build argument; hack/build-image.sh passes the commit's time) makes Python write
#     hash-based .pyc files instead of ones stamped with the build's clock, and BuildKit date the image and, with
#     rewrite-timestamp, its files by the commit.

ARG PYTHON_IMAGE=python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff

FROM ${PYTHON_IMAGE} AS builder
ARG SOURCE_DATE_EPOCH
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY admit ./admit
# admit itself, built with the locked setuptools (no build isolation: nothing is fetched that the lock does not
# name); the "fast" extra's orjson and uvloop are in the lock. DL3013 asks for pinned versions: this is the project.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-deps --no-build-isolation --no-index . \
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
