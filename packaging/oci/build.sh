#!/usr/bin/env bash
# Builds the intake container image from the static binary, without a container daemon
# (docs/src/container.md):
#   sudo bash packaging/oci/build.sh BINARY [OUTDIR]
# writes OUTDIR/intake-oci/ (an OCI image layout) and OUTDIR/intake-VERSION.oci.tar (the same
# image as an oci-archive, for `podman load`); OUTDIR defaults to target/oci. Both hold one
# image, named intake:VERSION (VERSION from `BINARY --version`).
#
# The image is the binary and the few files it needs, no base image: /usr/bin/intake,
# /etc/passwd and /etc/group naming its user (intake, 65532:65532), /etc/nsswitch.conf, and
# the data dir /var/lib/intake (a volume, owned by that user). The binary needs no CA bundle
# (the roots are built in: webpki-roots), no NSS modules (static glibc has the files and dns
# host lookups built in), no time zone data (it logs in UTC) and no /tmp.
#
# Reproducible: the same binary and SOURCE_DATE_EPOCH give the same image digest and the same
# archive bytes. SOURCE_DATE_EPOCH (the image's `created`, every file's mtime) defaults to the
# commit time of the binary's commit when this checkout knows it.
#
# Needs root (the data dir's owner is written into the layer as 65532), umoci and skopeo
# (Debian: apt-get install umoci skopeo).
set -euo pipefail
umask 022

# The image's user and what `intake serve` is given inside a container. Listening on
# 0.0.0.0: a container's loopback is unreachable from outside it; 8080 needs no capability.
readonly uid=65532 gid=65532 port=8080 data_dir=/var/lib/intake

die() {
    echo "build.sh: $*" >&2
    exit 1
}

binary=${1:-}
outdir=${2:-target/oci}
[ -n "$binary" ] || die "usage: build.sh BINARY [OUTDIR]"
[ -x "$binary" ] || die "$binary is not an executable file"
[ "$(id -u)" -eq 0 ] || die "run as root: the layer records the data dir's owner ($uid:$gid)"
for tool in umoci skopeo; do
    command -v "$tool" >/dev/null || die "$tool is missing (Debian: apt-get install $tool)"
done

# A dynamically linked binary would not start in an image without a C library. Captured
# first: ldd exits non-zero for a static binary.
linkage=$(ldd "$binary" 2>&1 || true)
grep -Eq 'statically linked|not a dynamic executable' <<<"$linkage" ||
    die "$binary is dynamically linked; build it with RUSTFLAGS='-C target-feature=+crt-static' (docs/src/deployment.md)"

# "intake 0.1.0 (commit 705a07c; x86_64-unknown-linux-gnu, dist, static, tls=rustls+ring)"
version_line=$("$binary" --version)
if [[ $version_line =~ ^intake\ ([^ ]+)\ \(commit\ ([^;]+)\;\ ([^-,]+)- ]]; then
    version=${BASH_REMATCH[1]}
    commit=${BASH_REMATCH[2]}
    cpu=${BASH_REMATCH[3]}
else
    die "cannot read the version, commit and target from: $version_line"
fi
case $cpu in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) die "no OCI architecture known for $cpu" ;;
esac

# The full commit id for the revision label, when this checkout knows the binary's commit.
here=$(cd "$(dirname "$0")" && pwd)
revision=$commit
if full=$(git -C "$here" rev-parse --verify --quiet "$commit^{commit}" 2>/dev/null); then
    revision=$full
fi
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git -C "$here" log -1 --format=%ct "$revision" 2>/dev/null) ||
        die "commit $commit unknown to this checkout: set SOURCE_DATE_EPOCH (seconds since 1970)"
fi
[[ $SOURCE_DATE_EPOCH =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be whole seconds: $SOURCE_DATE_EPOCH"
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# Where the sources are, when known (no default: the project names no public repository).
source_url=${INTAKE_IMAGE_SOURCE:-$(git -C "$here" remote get-url origin 2>/dev/null || true)}

name=intake:$version
layout=$outdir/intake-oci
archive=$outdir/intake-$version.oci.tar
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$outdir"
rm -rf "$layout" "$archive"
umoci init --layout "$layout"
umoci new --image "$layout:$name"

# umoci makes a layer from the difference between a bundle it unpacked and the same bundle
# after changes: unpack the empty image, fill its rootfs, repack.
umoci unpack --image "$layout:$name" "$work/bundle"
rootfs=$work/bundle/rootfs
install -d -m 0755 "$rootfs/usr/bin" "$rootfs/etc" "$rootfs/var/lib"
install -m 0755 "$binary" "$rootfs/usr/bin/intake"
# A name for the user, for `ps` and `whoami`-like tools and runtimes that look one up; HOME is
# the data dir. No shell exists in the image.
cat >"$rootfs/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
intake:x:$uid:$gid:intake data-intake API:$data_dir:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<EOF
root:x:0:
intake:x:$gid:
EOF
# Without this file glibc asks DNS before /etc/hosts, where runtimes write --add-host entries.
cat >"$rootfs/etc/nsswitch.conf" <<EOF
passwd: files
group: files
hosts: files dns
EOF
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"
# Mode 0700 as in the systemd install: master.key lives there. A named volume mounted here
# starts as a copy of this directory, owner included.
install -d -m 0700 -o "$uid" -g "$gid" "$rootfs$data_dir"
# umoci writes each file's mtime, owner and mode into the layer, in name order.
find "$rootfs" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

umoci repack --image "$layout:$name" \
    --history.created "$created" \
    --history.created_by "packaging/oci/build.sh (intake $version, commit $commit)" \
    "$work/bundle"

labels=(
    --config.label "org.opencontainers.image.title=intake"
    --config.label "org.opencontainers.image.description=A self-hosted data-intake API in one static binary: durable JSON ingest, search, poll and signed webhooks."
    --config.label "org.opencontainers.image.version=$version"
    --config.label "org.opencontainers.image.revision=$revision"
    --config.label "org.opencontainers.image.licenses=MIT"
    --config.label "org.opencontainers.image.created=$created"
)
if [ -n "$source_url" ]; then
    labels+=(--config.label "org.opencontainers.image.source=$source_url")
fi
# --no-history: a history entry would carry the time of this run. INTAKE_BACKUP__DIR lets
# `docker kill -s USR1` write backups into the volume, as [backup] dir does in the packaged
# config. No HEALTHCHECK: OCI configs have none (docs/src/container.md says what to use).
umoci config --image "$layout:$name" --no-history \
    --created "$created" --architecture "$arch" --os linux \
    --config.user "$uid:$gid" \
    --config.entrypoint /usr/bin/intake --config.cmd serve \
    --config.env PATH=/usr/bin \
    --config.env "INTAKE_LISTEN=0.0.0.0:$port" \
    --config.env "INTAKE_DATA_DIR=$data_dir" \
    --config.env "INTAKE_BACKUP__DIR=$data_dir/backups" \
    --config.workingdir "$data_dir" \
    --config.exposedports "$port/tcp" \
    --config.volume "$data_dir" \
    --config.stopsignal SIGTERM \
    "${labels[@]}"
# The empty image and the unconfigured one left blobs behind.
umoci gc --layout "$layout"

# skopeo's archive stamps its entries with the time of the copy: set every file of the layout
# to SOURCE_DATE_EPOCH (and a fixed mode) and pack the archive with tar, as skopeo does (an
# oci-archive is a tar of a layout), so that the archive's bytes are reproducible too.
find "$layout" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
find "$layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
tar --create --file "$archive" --directory "$layout" --sort=name --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    oci-layout index.json blobs
# skopeo reads the archive back: a malformed one fails here, not at `podman load`.
digest=$(skopeo inspect --format '{{.Digest}}' "oci-archive:$archive")
[ "$digest" = "$(skopeo inspect --format '{{.Digest}}' "oci:$layout:$name")" ] ||
    die "the archive's manifest digest differs from the layout's"

size=$(stat -c %s "$archive")
echo "built $name ($arch, created $created, commit $revision)"
echo "  layout:  $layout (oci:$layout:$name)"
echo "  archive: $archive ($size bytes; oci-archive:$archive)"
echo "  manifest digest: $digest"
