#!/bin/sh
# `make image`: builds images/Dockerfile as IMAGE with docker where an engine answers, else buildah or podman
# (Debian's packages, `make test-system`), then leaves what the image holds in the cache for the tests:
#
#   $BAKEOFF_IMAGE_CACHE/<key>/rootfs   the image's root filesystem, unpacked
#   $BAKEOFF_IMAGE_CACHE/<key>/oci      the image as an OCI layout, layers uncompressed (their file lists)
#   $BAKEOFF_IMAGE_CACHE/current        -> the <key> folder of the last build
#
# <key> hashes the Dockerfile, this script, pyproject.toml, README.md, components/, pipelines/ and the build
# arguments: a warm `make test` finds its folder and builds nothing.
#
# Usage: images/build.sh IMAGE   (run from the repository root)
# Settings (environment): ENGINE=docker|buildah|podman; BASE_IMAGE (else python:3.11-slim-bookworm where a
# registry answers, else a Debian bookworm root filesystem made with mmdebstrap); TENSORFLOW_EXTRAS (and-cuda);
# CA_BUNDLE (a TLS-intercepting proxy's CA, default the host's bundle: a build secret, in no layer).
set -eu

IMAGE=${1:?usage: images/build.sh IMAGE}
CACHE=${BAKEOFF_IMAGE_CACHE:-$HOME/.cache/bakeoff/image}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
TENSORFLOW_EXTRAS=${TENSORFLOW_EXTRAS:-}
REGISTRY_PROBE=https://registry-1.docker.io/v2/
# The base made here when no registry answers: Python 3.11 as `python` with pip, as python:3.11-slim has.
# pip installs as root into /usr/local, as it does there, so Debian's "externally managed" marker goes.
BASE_PACKAGES=python3,python3-pip,python-is-python3,ca-certificates
BASE_RELEASE=bookworm
BASE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

fail() { echo "make image: $*" >&2; exit 1; }
hash_of() { sha256sum | cut -c1-16; }

[ -f images/Dockerfile ] || fail "run from the repository root (no images/Dockerfile here)"

# ---- the engine: docker only where its daemon answers (a docker client alone builds nothing)
if [ -z "${ENGINE:-}" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then ENGINE=docker
  elif command -v buildah >/dev/null; then ENGINE=buildah
  elif command -v podman >/dev/null; then ENGINE=podman
  else fail "no container engine: start docker, or install buildah (\`make test-system\` does, as root)"
  fi
fi
case $ENGINE in docker|buildah|podman) ;; *) fail "ENGINE=$ENGINE: use docker, buildah or podman" ;; esac
command -v "$ENGINE" >/dev/null || fail "ENGINE=$ENGINE is not installed"

# ---- buildah and podman: their own storage under the cache, overlay where a mount namespace can mount it
STORE=
if [ "$ENGINE" != docker ]; then
  probe=$(mktemp -d)
  mkdir "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  if unshare -m mount -t overlay overlay \
      -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" "$probe/merged" 2>/dev/null; then
    DRIVER=overlay
  else
    DRIVER=vfs  # copies every layer whole: slower and ~3x the disk
  fi
  rm -rf "$probe"
  STORE="--root $CACHE/storage-$DRIVER --runroot ${XDG_RUNTIME_DIR:-/tmp}/bakeoff-image-$DRIVER --storage-driver $DRIVER"
fi
engine() { "$ENGINE" $STORE "$@"; }
has_image() {
  case $ENGINE in
    buildah) engine inspect --type image "$1" ;;
    *) engine image inspect "$1" ;;
  esac >/dev/null 2>&1
}

# ---- one build at a time per cache (a second one waits, then finds the first's result)
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9

# ---- the cache key
KEY=$({
  cat images/Dockerfile images/Dockerfile.dockerignore images/build.sh pyproject.toml README.md
  find components pipelines -type f ! -name '*.pyc' ! -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum
  echo "$IMAGE ${BASE_IMAGE:-} $TENSORFLOW_EXTRAS $ENGINE"
} | hash_of)
OUT=$CACHE/$KEY
if [ -f "$OUT/done" ] && has_image "$IMAGE"; then
  echo "make image: $IMAGE is built ($OUT)"
  ln -sfn "$KEY" "$CACHE/current"
  exit 0
fi

# ---- the base: a registry's python:3.11-slim-bookworm, else Debian's packages
if [ -z "${BASE_IMAGE:-}" ] \
    && ! curl -s -m 10 -o /dev/null "$REGISTRY_PROBE" 2>/dev/null; then
  command -v mmdebstrap >/dev/null || fail "no registry answers and mmdebstrap is missing: install it or set BASE_IMAGE"
  [ "$(id -u)" = 0 ] || fail "no registry answers: building the Debian base needs root, or set BASE_IMAGE"
  base_key=$(echo "$BASE_RELEASE $BASE_PACKAGES" | hash_of)
  BASE_IMAGE=localhost/bakeoff-base:$BASE_RELEASE-$base_key
  if ! has_image "$BASE_IMAGE"; then
    echo "make image: no registry answers; making the base $BASE_IMAGE with mmdebstrap"
    tarball=$CACHE/base-$base_key.tar
    mmdebstrap --quiet --format=tar --variant=minbase --include="$BASE_PACKAGES" \
      --customize-hook='rm -f "$1"/usr/lib/python3.*/EXTERNALLY-MANAGED' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      "$BASE_RELEASE" "$tarball.part"
    mv "$tarball.part" "$tarball"
    case $ENGINE in
      buildah)
        container=$(engine from scratch)
        engine add "$container" "$tarball" / >/dev/null
        engine config --env "PATH=$BASE_PATH" --cmd python3 "$container"
        engine commit --rm "$container" "$BASE_IMAGE" >/dev/null
        ;;
      *) engine import --change "ENV PATH=$BASE_PATH" --change 'CMD ["python3"]' "$tarball" "$BASE_IMAGE" >/dev/null ;;
    esac
    rm -f "$tarball"
  fi
fi

# ---- the build
set -- -f images/Dockerfile -t "$IMAGE" --build-arg "TENSORFLOW_EXTRAS=$TENSORFLOW_EXTRAS"
[ -n "${BASE_IMAGE:-}" ] && set -- "$@" --build-arg "BASE_IMAGE=$BASE_IMAGE"
[ -s "$CA_BUNDLE" ] && set -- "$@" --secret "id=ca,src=$CA_BUNDLE"
echo "make image: building $IMAGE with $ENGINE${STORE:+ ($DRIVER storage)}"
case $ENGINE in
  docker) DOCKER_BUILDKIT=1 docker build "$@" . ;;
  # chroot isolation: no runtime, no user namespace; works as root inside a container
  *) engine build --isolation chroot --layers --pull=never --ignorefile images/Dockerfile.dockerignore "$@" . ;;
esac

# ---- what the tests read: the OCI layout (uncompressed layers) and the unpacked root filesystem
rm -rf "$OUT" && mkdir -p "$OUT/rootfs"
case $ENGINE in
  docker)
    docker save "$IMAGE" | tar -x -C "$OUT" --one-top-level=oci  # an OCI layout since Docker 25
    if [ ! -f "$OUT/oci/index.json" ]; then  # an older daemon saves only its own format: skopeo reads the daemon
      command -v skopeo >/dev/null \
        || fail "this docker daemon saves no OCI layout (Docker < 25): install skopeo, or use Docker >= 25"
      rm -rf "$OUT/oci"
      skopeo copy --quiet "docker-daemon:$IMAGE" "oci:$OUT/oci"
    fi
    container=$(docker create "$IMAGE")
    docker export "$container" | tar -x -C "$OUT/rootfs"
    docker rm "$container" >/dev/null
    ;;
  buildah)
    engine push --disable-compression "$IMAGE" "oci:$OUT/oci" >/dev/null
    container=$(engine from --pull=never "$IMAGE")
    (cd "$(engine mount "$container")" && tar -c .) | tar -x -C "$OUT/rootfs"
    engine umount "$container" >/dev/null && engine rm "$container" >/dev/null
    ;;
  podman)
    engine push "$IMAGE" "oci:$OUT/oci" >/dev/null
    (cd "$(engine image mount "$IMAGE")" && tar -c .) | tar -x -C "$OUT/rootfs"
    engine image unmount "$IMAGE" >/dev/null
    ;;
esac
touch "$OUT/done"
ln -sfn "$KEY" "$CACHE/current"
for done in "$CACHE"/*/done; do  # an older build's folders (~6 GB each), not the link to this one
  folder=${done%/done}
  [ -L "$folder" ] || [ "$folder" = "$OUT" ] || rm -rf "$folder"
done
case $ENGINE in  # the older builds' images the tag moved off (~3 GB each); the layers this build reuses stay
  buildah) engine rmi --prune >/dev/null ;;
  podman) engine image prune --force >/dev/null ;;
esac  # docker: the user's own store, left as it is
echo "make image: built $IMAGE; its root filesystem is $OUT/rootfs"
[ "$ENGINE" = docker ] || echo "make image: push it with: $ENGINE $STORE push $IMAGE"
