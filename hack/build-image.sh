#!/usr/bin/env bash
# Build admit's image from the Dockerfile, tagged <IMAGE>:<version> (version: admit/__init__.py) and labelled
# org.opencontainers.image.version=<version>, with docker or podman.
#
#   hack/build-image.sh                                   # a local image for this machine's platform (no push)
#   IMAGE=admit hack/build-image.sh && kind load docker-image admit:0.1.0      # for kind (docs/install.md)
#   TARBALL=dist/admit-image.tar hack/build-image.sh      # ... and `docker save` it to a file (kind load image-archive)
#   PUSH=true IMAGE=ghcr.io/admit-dev/admit hack/build-image.sh   # linux/amd64 + linux/arm64, pushed (the release)
#   REPRODUCIBLE=check hack/build-image.sh                # build twice without cache; fail unless the images match
#
# Settings (environment):
#   IMAGE      image path (default: the chart's image.repository, ghcr.io/admit-dev/admit)
#   ENGINE     docker or podman (default: docker when on PATH, else podman)
#   PLATFORMS  platforms to build, comma-separated (default: this machine's for a local build, linux/amd64,linux/arm64
#              with PUSH=true). More than one needs docker buildx, or podman (a manifest list).
#   PUSH       true: push to the registry (the login is the caller's: docker login / podman login); default false
#   TARBALL    a file to save the built image to (a local, one-platform build only)
#   SOURCE_DATE_EPOCH  seconds since 1970 the image and its files are dated (default: the last commit's time,
#              git log -1 --format=%ct), passed as the build argument of that name: Python then writes hash-based
#              .pyc files, and BuildKit (docker buildx) dates the image config and, with rewrite-timestamp, every
#              file of the layers by it; podman gets --source-date-epoch and --rewrite-timestamp (podman 5.1+)
#   REPRODUCIBLE  "check": instead of the build above, build this machine's platform twice with --no-cache and the
#              same SOURCE_DATE_EPOCH, and compare the two image IDs (the digest of the image config, which lists
#              every layer's digest and the date): exit 0 and print the ID when they are equal, exit 1 naming both
#              when not. Needs docker buildx (BuildKit) or podman: the classic docker builder stamps files with the
#              build's clock, so its images never match.
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

case "${REPRODUCIBLE:-}" in ""|check) ;; *) fail "REPRODUCIBLE must be check (or unset), not '$REPRODUCIBLE'" ;; esac
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH="$(git log -1 --format=%ct 2>/dev/null)" \
    || fail "SOURCE_DATE_EPOCH is not set and this is no git checkout: set it (seconds since 1970, e.g. the release's commit time)"
fi
[[ "$SOURCE_DATE_EPOCH" =~ ^[0-9]+$ ]] || fail "SOURCE_DATE_EPOCH must be whole seconds since 1970, not '$SOURCE_DATE_EPOCH'"

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
epoch=(--build-arg "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH")

if [ "${REPRODUCIBLE:-}" = check ]; then
  if [ "$PUSH" = true ] || [ "$multi" = true ] || [ -n "${TARBALL:-}" ]; then
    fail "REPRODUCIBLE=check builds this machine's platform twice and keeps nothing: unset PUSH, TARBALL and PLATFORMS"
  fi
  ids=()
  for run in 1 2; do
    ref="$IMAGE:$VERSION-repro$run"
    if [ "$ENGINE" = docker ]; then
      docker buildx version >/dev/null 2>&1 \
        || fail "REPRODUCIBLE=check needs docker buildx (BuildKit): the classic builder dates every file by its clock; install the buildx plugin or use podman (ENGINE=podman)"
      docker buildx build --no-cache "${epoch[@]}" --label "$LABEL" \
        --output "type=docker,name=$ref,rewrite-timestamp=true" .
      ids+=("$(docker image inspect --format '{{.Id}}' "$ref")")
      docker image rm "$ref" >/dev/null
    else
      podman build --no-cache "${epoch[@]}" --source-date-epoch "$SOURCE_DATE_EPOCH" --rewrite-timestamp \
        --label "$LABEL" --tag "$ref" .
      ids+=("$(podman image inspect --format '{{.Id}}' "$ref")")
      podman image rm "$ref" >/dev/null
    fi
  done
  if [ "${ids[0]}" != "${ids[1]}" ]; then
    echo "hack/build-image.sh: not reproducible: two builds of this checkout (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH) gave ${ids[0]} and ${ids[1]}" >&2
    exit 1
  fi
  echo "reproducible: ${ids[0]} (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, twice without cache)"
  exit 0
fi

if [ "$ENGINE" = docker ]; then
  if docker buildx version >/dev/null 2>&1; then
    # --push / --load, with every file of the layers dated SOURCE_DATE_EPOCH (BuildKit 0.13+, docker 26+)
    if [ "$PUSH" = true ]; then
      output="type=image,push=true,rewrite-timestamp=true"
    elif [ "$multi" = true ]; then
      fail "docker's image store holds one platform: with PLATFORMS=$PLATFORMS set PUSH=true, or name one platform"
    else
      output="type=docker,rewrite-timestamp=true"
    fi
    docker buildx build ${platform_flag[@]+"${platform_flag[@]}"} "${epoch[@]}" --label "$LABEL" --tag "$REF" --output "$output" .
  else
    if [ "$multi" = true ]; then
      fail "building for $PLATFORMS needs docker buildx (not installed: 'docker buildx version' fails); install the buildx plugin, use podman (ENGINE=podman), or set PLATFORMS to one platform"
    fi
    docker build ${platform_flag[@]+"${platform_flag[@]}"} "${epoch[@]}" --label "$LABEL" --tag "$REF" .
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
    podman build --platform "$PLATFORMS" "${epoch[@]}" --label "$LABEL" --manifest "$REF" .
    if [ "$PUSH" = true ]; then
      podman manifest push --all "$REF" "docker://$REF"
    fi
  else
    podman build ${platform_flag[@]+"${platform_flag[@]}"} "${epoch[@]}" --label "$LABEL" --tag "$REF" .
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
