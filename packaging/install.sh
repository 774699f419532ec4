#!/bin/sh
# Installs the single intake binary as a systemd service (docs/src/deployment.md):
#   sudo packaging/install.sh [path/to/intake]
# puts the binary in $PREFIX/bin, its shell completions (bash, zsh, fish) and manual pages in
# $PREFIX/share, the config in /etc/intake (an existing one is never overwritten), the unit,
# the sysusers.d and tmpfiles.d snippets in /etc, creates the intake user and its
# directories, and prints the next steps.
#
# DESTDIR=/some/root installs into that tree instead and creates no user (for packaging and
# tests); PREFIX defaults to /usr/local.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-}
if [ -z "$binary" ]; then
    for candidate in "$here/../target/x86_64-unknown-linux-gnu/dist/intake" \
        "$here/../target/dist/intake" "$here/../target/release/intake" "./intake"; do
        if [ -x "$candidate" ]; then binary=$candidate; break; fi
    done
fi
if [ -z "$binary" ] || [ ! -x "$binary" ]; then
    echo "install.sh: no intake binary found; pass its path (e.g. target/release/intake)" >&2
    exit 1
fi

DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
root=$DESTDIR

if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: run as root (or set DESTDIR to install into a tree)" >&2
    exit 1
fi

install -d "$root$PREFIX/bin" "$root/etc/systemd/system" "$root/etc/sysusers.d" \
    "$root/etc/tmpfiles.d"
install -m 0755 "$binary" "$root$PREFIX/bin/intake"
sed "s#/usr/bin/intake#$PREFIX/bin/intake#" "$here/systemd/intake.service" \
    >"$root/etc/systemd/system/intake.service"
chmod 0644 "$root/etc/systemd/system/intake.service"
install -m 0644 "$here/sysusers.d/intake.conf" "$root/etc/sysusers.d/intake.conf"
install -m 0644 "$here/tmpfiles.d/intake.conf" "$root/etc/tmpfiles.d/intake.conf"

# Completions and manual pages where bash-completion, zsh, fish and man look under $PREFIX.
assets=$(mktemp -d)
trap 'rm -rf "$assets"' EXIT
sh "$here/assets.sh" "$binary" "$assets"
share=$root$PREFIX/share
install -d "$share/bash-completion/completions" "$share/zsh/site-functions" \
    "$share/fish/vendor_completions.d" "$share/man/man1"
install -m 0644 "$assets/completions/intake.bash" "$share/bash-completion/completions/intake"
install -m 0644 "$assets/completions/_intake" "$share/zsh/site-functions/_intake"
install -m 0644 "$assets/completions/intake.fish" "$share/fish/vendor_completions.d/intake.fish"
install -m 0644 "$assets/man/"*.1 "$share/man/man1/"

if [ -z "$root" ]; then
    # The user first: the directories and the config belong to it.
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers /etc/sysusers.d/intake.conf
    elif ! getent passwd intake >/dev/null; then
        useradd --system --user-group --home-dir /var/lib/intake --shell /usr/sbin/nologin intake
    fi
    if command -v systemd-tmpfiles >/dev/null 2>&1; then
        systemd-tmpfiles --create /etc/tmpfiles.d/intake.conf
    else
        install -d -m 0700 -o intake -g intake /var/lib/intake
        install -d -m 0750 -o root -g intake /etc/intake
    fi
else
    install -d -m 0700 "$root/var/lib/intake"
    install -d -m 0750 "$root/etc/intake"
fi

config=$root/etc/intake/intake.toml
if [ -e "$config" ]; then
    echo "Kept the existing $config."
else
    install -m 0640 "$here/intake.toml" "$config"
    if [ -z "$root" ]; then chgrp intake "$config"; fi
    echo "Installed $config."
fi

if [ -z "$root" ] && command -v systemctl >/dev/null 2>&1; then
    systemctl daemon-reload
fi

cat <<NEXT
Installed $("$root$PREFIX/bin/intake" --version 2>/dev/null || echo intake) into ${root:-/}.
Next steps:
  1. Edit /etc/intake/intake.toml (listen, public_url, [tls]); check it with
       intake check --config /etc/intake/intake.toml
  2. Create the owner account (prints its password and API token once):
       sudo -u intake $PREFIX/bin/intake init --config /etc/intake/intake.toml --owner-email you@example.com
  3. Start the service and follow its log:
       systemctl enable --now intake
       journalctl -u intake -f
NEXT
