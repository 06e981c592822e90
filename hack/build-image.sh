#!/usr/bin/env bash
# Build admit's image from the Dockerfile, tagged <IMAGE>:<version> (version: admit/__init__.py) and labelled
# org.opencontainers.image.version=<version>, with docker or podman.
#
#   hack/build-image.sh                                   # a local image for this machine's platform (no push)
#   IMAGE=admit hack/build-image.sh && kind load docker-image admit:0.1.0      # for kind (docs/install.md)
#   TARBALL=dist/admit-image.tar hack/build-image.sh      # ... and `docker save` it to a file (kind load image-archive)
#   PUSH=true IMAGE=ghcr.io/admit-dev/admit hack/build-image.sh   # linux/amd64 + linux/arm64, pushed (the release)
#
# Settings (environment):
#   IMAGE      image path (default: the chart's image.repository, ghcr.io/admit-dev/admit)
#   ENGINE     docker or podman (default: docker when on PATH, else podman)
#   PLATFORMS  platforms to build, comma-separated (default: this machine's for a local build, linux/amd64,linux/arm64
#              with PUSH=true). More than one needs docker buildx, or podman (a manifest list).
#   PUSH       true: push to the registry (the login is the caller's: docker login / podman login); default false
#   TARBALL    a file to save the built image to (a local, one-platform build only)
#
# Plain `docker build` (the classic builder, or BuildKit without the buildx plugin) builds one platform: this
# machine's, or the one PLATFORMS names. Every mistake ends with one line on stderr and exit code 2; a build that
# fails exits with the engine's code.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "hack/build-image.sh: $*" >&2; exit 2; }

IMAGE="${IMAGE:-ghcr.io/admit-dev/admit}"
PUSH="${PUSH:-false}"
case "$PUSH" in true|false) ;; *) fail "PUSH must be true or false, not '$PUSH'" ;; esac
if [ "$PUSH" = true ]; then
  PLATFORMS="${PLATFORMS:-linux/amd64,linux/arm64}"
else
  PLATFORMS="${PLATFORMS:-}"
fi
if [ -z "$IMAGE" ] || [[ "$IMAGE" == *[[:space:]]* ]]; then
  fail "IMAGE '$IMAGE' is not an image path such as registry.example.com/team/admit"
fi
if [[ "${IMAGE##*/}" == *:* || "$IMAGE" == *@* ]]; then  # a registry's :port comes before a /, a tag after the last
  fail "IMAGE '$IMAGE' carries a tag or digest: give the path only (the tag is the version, $(python3 hack/release.py version 2>/dev/null || echo '<version>'))"
fi

if [ -n "${ENGINE:-}" ]; then
  case "$ENGINE" in docker|podman) ;; *) fail "ENGINE must be docker or podman, not '$ENGINE'" ;; esac
  command -v "$ENGINE" >/dev/null || fail "ENGINE=$ENGINE, but $ENGINE is not on PATH"
elif command -v docker >/dev/null; then
  ENGINE=docker
elif command -v podman >/dev/null; then
  ENGINE=podman
else
  fail "no container engine: install docker or podman (or set ENGINE to one on PATH)"
fi

command -v python3 >/dev/null || fail "python3 is needed to read the version from admit/__init__.py"
VERSION="$(python3 hack/release.py version)"
REF="$IMAGE:$VERSION"
LABEL="org.opencontainers.image.version=$VERSION"
multi=false
[[ "$PLATFORMS" == *,* ]] && multi=true
if [ -n "${TARBALL:-}" ] && { [ "$PUSH" = true ] || [ "$multi" = true ]; }; then
  fail "TARBALL saves a local one-platform build: unset PUSH and give PLATFORMS one platform (or none)"
fi
platform_flag=()
[ -n "$PLATFORMS" ] && platform_flag=(--platform "$PLATFORMS")

if [ "$ENGINE" = docker ]; then
  if docker buildx version >/dev/null 2>&1; then
    if [ "$PUSH" = true ]; then
      output=--push
    elif [ "$multi" = true ]; then
      fail "docker's image store holds one platform: with PLATFORMS=$PLATFORMS set PUSH=true, or name one platform"
    else
      output=--load
    fi
    docker buildx build ${platform_flag[@]+"${platform_flag[@]}"} --label "$LABEL" --tag "$REF" "$output" .
  else
    if [ "$multi" = true ]; then
      fail "building for $PLATFORMS needs docker buildx (not installed: 'docker buildx version' fails); install the buildx plugin, use podman (ENGINE=podman), or set PLATFORMS to one platform"
    fi
    docker build ${platform_flag[@]+"${platform_flag[@]}"} --label "$LABEL" --tag "$REF" .
    if [ "$PUSH" = true ]; then
      docker push "$REF"
    fi
  fi
  if [ -n "${TARBALL:-}" ]; then
    mkdir -p "$(dirname "$TARBALL")"
    docker save --output "$TARBALL" "$REF"
  fi
else
  if [ "$multi" = true ]; then
    # several platforms: a manifest list (podman build --manifest), pushed with every image it lists
    podman build --platform "$PLATFORMS" --label "$LABEL" --manifest "$REF" .
    if [ "$PUSH" = true ]; then
      podman manifest push --all "$REF" "docker://$REF"
    fi
  else
    podman build ${platform_flag[@]+"${platform_flag[@]}"} --label "$LABEL" --tag "$REF" .
    if [ "$PUSH" = true ]; then
      podman push "$REF"
    fi
  fi
  if [ -n "${TARBALL:-}" ]; then
    mkdir -p "$(dirname "$TARBALL")"
    podman save --format docker-archive --output "$TARBALL" "$REF"
  fi
fi
echo "$REF"
