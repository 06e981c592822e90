#!/usr/bin/env bash
# Build admit's image from the Dockerfile for linux/amd64 and linux/arm64 with docker buildx, tagged
# <IMAGE>:<version> (version: admit/__init__.py), and push it (the release workflow runs exactly this).
#
#   IMAGE=ghcr.io/admit-dev/admit hack/build-image.sh            # build both platforms and push
#   PUSH=false PLATFORMS=linux/amd64 hack/build-image.sh          # a local build into docker (one platform)
#
# IMAGE defaults to the chart's image.repository; the registry login is the caller's (docker login).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-ghcr.io/admit-dev/admit}"
PLATFORMS="${PLATFORMS:-linux/amd64,linux/arm64}"
PUSH="${PUSH:-true}"
VERSION="$(python3 hack/release.py version)"
if [ "$PUSH" = true ]; then
  output=--push
else
  output=--load  # docker's image store holds one platform: set PLATFORMS to yours
fi
docker buildx build --platform "$PLATFORMS" \
  --label "org.opencontainers.image.version=$VERSION" \
  --tag "$IMAGE:$VERSION" "$output" .
echo "$IMAGE:$VERSION"
