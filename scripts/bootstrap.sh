#!/usr/bin/env bash
# Set up everything contain needs on this machine, idempotently, saying what it does.
#   1. Debian packages (only when running as root and something is missing)
#   2. a .venv in the repo root with contain installed (pip install -e .[dev])
#   3. the in-sandbox supervisor, compiled once into the cache
#   4. the microVM guest agent (static, for the guest's initramfs), compiled once into the cache
#   5. the microVM guest (kernel unpacked from Debian's cloud kernel .deb, initramfs with the
#      agent, squashfs userland), built once into the cache, rebuilt only when an input changes
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian package -> a file it provides; installed only when that file is missing.
PACKAGES=(
  "bubblewrap:/usr/bin/bwrap"
  "libseccomp2:/usr/lib/x86_64-linux-gnu/libseccomp.so.2"
  "gcc:/usr/bin/gcc"
  "libc6-dev:/usr/lib/x86_64-linux-gnu/libc.a"
  "iproute2:/usr/sbin/ip"
  "util-linux:/usr/bin/unshare"
  "curl:/usr/bin/curl"
  "openssl:/usr/bin/openssl"
  "tinyproxy:/usr/bin/tinyproxy"
  "chromium:/usr/bin/chromium"
  "postgresql:/usr/lib/postgresql"
  "nodejs:/usr/bin/node"
  "npm:/usr/bin/npm"
  "python3-requests:/usr/lib/python3/dist-packages/requests"  # a client the egress tests use inside sandboxes
  "runc:/usr/sbin/runc"  # the container backend's OCI runtime
  "runsc:/usr/bin/runsc"  # gVisor, the container backend's user-space kernel
  "qemu-system-x86:/usr/bin/qemu-system-x86_64"  # the microvm backend's VMM
  "busybox-static:/bin/busybox"  # the microVM guest's initramfs tools
  "squashfs-tools:/usr/bin/mksquashfs"  # the microVM guest's read-only images
  "socat:/usr/bin/socat"  # carries the microVM guest's forwards to egress
)
missing=()
for entry in "${PACKAGES[@]}"; do
  pkg=${entry%%:*}; file=${entry#*:}
  [ -e "$file" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "bootstrap: missing packages: ${missing[*]} (run as root, or install them yourself)" >&2
    exit 1
  fi
else
  echo "bootstrap: system packages present"
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.contain-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "bootstrap: installing contain into .venv (pip install -e .[dev])"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'
  touch "$stamp"
else
  echo "bootstrap: contain already installed in .venv"
fi
# npm packages used by tests (the MCP reference servers), pinned by tests/npm/package-lock.json.
if [ -f tests/npm/package.json ]; then
  if [ ! -d tests/npm/node_modules ] || [ tests/npm/package.json -nt tests/npm/node_modules ]; then
    echo "bootstrap: installing npm packages for tests (tests/npm)"
    npm install --prefix tests/npm --no-audit --no-fund --silent
    touch tests/npm/node_modules
  else
    echo "bootstrap: npm packages for tests present"
  fi
fi
echo "bootstrap: building the in-sandbox supervisor (cached when unchanged)"
.venv/bin/contain doctor --build-supervisor >/dev/null
echo "bootstrap: building the microVM guest agent (cached by source hash; rebuilt only when it changes)"
.venv/bin/contain doctor --build-guest-agent >/dev/null
echo "bootstrap: building the microVM guest (cached when unchanged)"
.venv/bin/contain doctor --build-guest | sed 's/^/bootstrap: /'
echo "bootstrap: ready; the CLI is .venv/bin/contain"
