#!/usr/bin/env bash
# Checks packaging/oci/build.sh on a static intake binary (run by .ci/run after the release
# build; as root, with umoci, skopeo, python3 and curl):
#   bash packaging/oci/check.sh BINARY
# 1. two builds a second apart give the same manifest digest and the same archive bytes;
# 2. the image's config (skopeo inspect) has the user, port, volume, entrypoint and labels
#    expected, with the binary's version and commit;
# 3. the rootfs that `umoci unpack` makes runs, as the image's user and with the process
#    umoci's runtime bundle describes (arguments, environment, working directory):
#    `--version`, then `init` on the empty volume, then `serve`, which answers /healthz and
#    /readyz, whose own `intake health --ready` (the compose healthcheck) passes inside the
#    image, writes its data dir as that user and exits 0 on SIGTERM.
# The processes run chrooted in a private mount namespace holding the /dev nodes and /proc a
# container runtime would provide (the binary reads /dev/urandom); no daemon is involved.
set -euo pipefail

# What the image must say (packaging/oci/build.sh, docs/src/container.md).
readonly want_user=65532:65532 want_port=8080/tcp want_volume=/var/lib/intake

die() {
    echo "check.sh: FAILED: $*" >&2
    exit 1
}

binary=${1:-}
[ -n "$binary" ] || die "usage: check.sh BINARY"
[ "$(id -u)" -eq 0 ] || die "run as root (build.sh and the chroot need it)"
for tool in umoci skopeo python3 curl unshare; do
    command -v "$tool" >/dev/null || die "$tool is missing"
done
here=$(cd "$(dirname "$0")" && pwd)

tmp=$(mktemp -d)
server_pid=
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -KILL "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    # The mounts lived in the server's own mount namespace and ended with it; never cross
    # into another file system all the same.
    rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT

# json FILE PYTHON-EXPRESSION: prints the value of the expression over the document `d`; a
# list as one item per line.
json() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print("\n".join(map(str, v)) if isinstance(v, list) else v)
EOF
}

echo "== build twice (reproducible: same manifest digest, same archive bytes)"
started=$SECONDS
bash "$here/build.sh" "$binary" "$tmp/a"
sleep 1 # a build that leaked the wall clock into a timestamp would differ now
bash "$here/build.sh" "$binary" "$tmp/b" >/dev/null
archive=$(echo "$tmp"/a/intake-*.oci.tar)
[ -f "$archive" ] || die "no archive in $tmp/a"
layout=$tmp/a/intake-oci
digest_a=$(skopeo inspect --format '{{.Digest}}' "oci-archive:$archive")
digest_b=$(skopeo inspect --format '{{.Digest}}' "oci-archive:$tmp/b/${archive##*/}")
echo "first build:  $digest_a"
echo "second build: $digest_b"
[ "$digest_a" = "$digest_b" ] || die "two builds of the same binary differ"
cmp "$archive" "$tmp/b/${archive##*/}" || die "the two archives differ"
echo "image: $(stat -c %s "$archive") bytes archived; layer $(json "$layout/blobs/sha256/${digest_a#sha256:}" 'd["layers"][0]["size"]') bytes compressed; both builds in $((SECONDS - started)) s"

echo "== the image's config (skopeo inspect --config)"
skopeo inspect --config "oci-archive:$archive" >"$tmp/config.json"
python3 -m json.tool "$tmp/config.json"
host_version=$("$binary" --version)
version=$(json "$tmp/config.json" 'd["config"]["Labels"]["org.opencontainers.image.version"]')
revision=$(json "$tmp/config.json" 'd["config"]["Labels"]["org.opencontainers.image.revision"]')
# `intake 0.1.0 (commit 705a07c; ...)`: the label's version and a commit the revision begins with.
short=${host_version#* (commit }
short=${short%%;*}
[[ $host_version == "intake $version (commit "* ]] || die "version label $version, binary: $host_version"
[[ $revision == "$short"* ]] || die "revision label $revision, binary's commit: $short"
[ "$(json "$tmp/config.json" 'd["config"]["User"]')" = "$want_user" ] || die "User is not $want_user"
[ "$(json "$tmp/config.json" 'list(d["config"]["ExposedPorts"])')" = "$want_port" ] ||
    die "ExposedPorts is not $want_port"
[ "$(json "$tmp/config.json" 'list(d["config"]["Volumes"])')" = "$want_volume" ] ||
    die "Volumes is not $want_volume"
for label in title description licenses created; do
    json "$tmp/config.json" "d['config']['Labels']['org.opencontainers.image.$label']" >/dev/null ||
        die "label org.opencontainers.image.$label is missing"
done
[ "$(json "$tmp/config.json" 'd["created"]')" = \
    "$(json "$tmp/config.json" 'd["config"]["Labels"]["org.opencontainers.image.created"]')" ] ||
    die "created and its label differ"
mapfile -t entrypoint < <(json "$tmp/config.json" 'd["config"]["Entrypoint"]')
echo "ok: user $want_user, port $want_port, volume $want_volume, version $version, revision $revision"

echo "== umoci unpack, then the image's process in its rootfs"
mapfile -t tags < <(umoci ls --layout "$layout")
[ "${#tags[@]}" -eq 1 ] || die "expected one tag in the layout, got: ${tags[*]}"
echo "tag: ${tags[0]}"
umoci unpack --image "$layout:${tags[0]}" "$tmp/bundle"
rootfs=$tmp/bundle/rootfs
# What a runtime would run: umoci's runtime-spec config.json, made from the image's config.
spec=$tmp/bundle/config.json
mapfile -t args < <(json "$spec" 'd["process"]["args"]')
mapfile -t env < <(json "$spec" 'd["process"]["env"]')
uid=$(json "$spec" 'd["process"]["user"]["uid"]')
gid=$(json "$spec" 'd["process"]["user"]["gid"]')
cwd=$(json "$spec" 'd["process"]["cwd"]')
echo "process: ${args[*]} as $uid:$gid in $cwd with ${env[*]}"
[ "$uid:$gid" = "$want_user" ] || die "the bundle runs as $uid:$gid"
# umoci takes HOME from the image's /etc/passwd: the user has an entry there.
printf '%s\n' "${env[@]}" | grep -qx "HOME=$want_volume" || die "no HOME=$want_volume: is the user in /etc/passwd?"

# in_image EXTRA_ENV... -- ARGS...: runs ARGS in the rootfs as the image's user, with the
# image's environment (plus EXTRA_ENV) and working directory, in a private mount namespace
# with /dev/{null,zero,random,urandom} and /proc. It execs: call it in a subshell or in the
# background, where $! is then the image's process itself.
in_image() {
    local extra=()
    while [ "$1" != -- ]; do
        extra+=("$1")
        shift
    done
    shift
    # shellcheck disable=SC2016 # the script's variables are the inner bash's, not ours
    exec unshare --mount --propagation private -- bash -euc '
        root=$1 uid=$2 gid=$3 cwd=$4 n=$5
        shift 5
        environment=("${@:1:$n}")
        shift "$n"
        mkdir -p "$root/dev" "$root/proc"
        mount -t tmpfs -o mode=0755,nosuid tmpfs "$root/dev"
        for node in null zero random urandom; do
            touch "$root/dev/$node"
            mount --bind "/dev/$node" "$root/dev/$node"
        done
        mount -t proc proc "$root/proc"
        exec env -i "${environment[@]}" "$(command -v unshare)" --root="$root" --wd="$cwd" \
            --setgid="$gid" --setuid="$uid" -- "$@"
    ' in_image "$rootfs" "$uid" "$gid" "$cwd" "$((${#env[@]} + ${#extra[@]}))" \
        "${env[@]}" "${extra[@]}" "$@"
}

image_version=$(in_image -- "${entrypoint[@]}" --version) || die "--version fails in the image"
echo "--version in the image: $image_version"
[ "$image_version" = "$host_version" ] || die "the image's binary says: $image_version"

# The documented first start: `intake init` on the empty volume (docs/src/container.md).
(in_image -- "${entrypoint[@]}" init --owner-email owner@example.com --json) >"$tmp/init.json" ||
    die "init fails in the image (its message above)"
[ "$(json "$tmp/init.json" 'd["token"][:4]')" = itk_ ] || die "init printed no token"
echo "init: owner created, token printed"

# The image listens on 0.0.0.0:8080; here a free loopback port, so that the check neither
# collides with another service nor listens outside this machine.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
in_image "INTAKE_LISTEN=127.0.0.1:$port" -- "${args[@]}" >"$tmp/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || {
        cat "$tmp/serve.log" >&2
        die "serve exited before answering"
    }
    sleep 0.1
done
health=$(curl -fsS "http://127.0.0.1:$port/healthz") || die "/healthz does not answer"
echo "/healthz: $health"
ready=
for _ in $(seq 100); do
    if ready=$(curl -fsS "http://127.0.0.1:$port/readyz"); then break; fi
    sleep 0.1
done
[ -n "$ready" ] || die "/readyz never answered 200"
echo "/readyz: $ready"
# The image's own probe (compose.yaml's healthcheck), in the image as its user, asking the
# address INTAKE_LISTEN gives.
probe=$(in_image "INTAKE_LISTEN=0.0.0.0:$port" -- "${entrypoint[@]}" health --ready) ||
    die "intake health --ready fails in the image"
echo "intake health --ready in the image: $probe"
ids=$(awk '/^Uid:/ { u = $2 " " $3 " " $4 " " $5 } /^Gid:/ { g = $2 " " $3 " " $4 " " $5 } END { print u "/" g }' "/proc/$server_pid/status")
[ "$ids" = "$uid $uid $uid $uid/$gid $gid $gid $gid" ] || die "serve runs as uid/gid $ids"
echo "serve runs as $uid:$gid (real, effective, saved, filesystem)"
[ -f "$rootfs$want_volume/intake.redb" ] || die "no intake.redb in $want_volume"
strangers=$(find "$rootfs$want_volume" \( ! -uid "$uid" -o ! -gid "$gid" \) -printf '%p %u:%g\n')
[ -z "$strangers" ] || die "files in the volume not owned by $uid:$gid: $strangers"
echo "data dir: $(find "$rootfs$want_volume" -mindepth 1 | wc -l) entries, all owned by $uid:$gid"

kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
server_pid=
cat "$tmp/serve.log"
[ "$status" -eq 0 ] || die "serve exited with $status on SIGTERM"
grep -q "listening on http://127.0.0.1:$port" "$tmp/serve.log" || die "no 'listening on' line"
echo "serve: stopped on SIGTERM, exit 0"
echo "packaging/oci/check.sh: all checks passed ($digest_a, $((SECONDS - started)) s)"
