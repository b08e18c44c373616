#!/usr/bin/env bash
# setup.sh — installs everything kvrun needs to build and test, by Debian package name.
# Idempotent: packages already installed are skipped and apt is not touched when nothing is
# missing. Runs as root, or through sudo otherwise. Debian 12 (bookworm) or newer.
set -euo pipefail

PACKAGES=(
  build-essential  # g++, make
  cmake
  ninja-build
  pkg-config
  git
  libgtest-dev libgmock-dev   # GoogleTest
  libbenchmark-dev            # Google Benchmark
  libcli11-dev                # command line (CLI11)
  nlohmann-json3-dev          # JSON
  libcpp-httplib-dev          # HTTP server (kvrun serve)
  libcurl4-openssl-dev        # model downloads (kvrun pull, -hf, -mu)
  libssl-dev                  # sha256 of downloads (OpenSSL libcrypto)
  libpcre2-dev                # tokenizer pre-tokenizer regexes
  libicu-dev                  # tokenizer Unicode properties and normalization
  libedit-dev                 # REPL line editing
  libxxhash-dev               # prefix-cache block hashes
  clang libclang-rt-dev       # libFuzzer (GGUF reader fuzzing)
  clang-format
  python3 python3-jinja2      # test oracle for chat templates
  python3-jsonschema          # test oracle for JSON Schema constrained output
  tmux                        # REPL tests through a pseudo-terminal
  chromium                    # the serve chat page's test (headless, via npm puppeteer-core)
  googletest                  # GoogleTest's sources, for the AArch64 cross build
  libvulkan-dev glslc         # Vulkan backend: the loader and the GLSL → SPIR-V compiler
  mesa-vulkan-drivers         # lavapipe: the Vulkan tests run on it where there is no GPU
)
# The NEON kernels' tests on an x86-64 machine: a cross compiler and qemu (scripts/arm-check.sh).
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  PACKAGES+=(g++-aarch64-linux-gnu qemu-user)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
