# Sourced by the serve benches (run.sh, mixed.sh, many.sh) from the repository's root: the
# tools they need, and the hako binary they measure.

# Exits with the package to install when a tool is missing.
need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed (apt-get install -y $tool)" >&2; exit 1; }
  done
}

# The hako binary to measure: $HAKO, or a release build (default features) made now.
hako_binary() {
  if [[ -n "${HAKO:-}" ]]; then
    echo "$HAKO"
  else
    cargo build --release --quiet
    echo "${CARGO_TARGET_DIR:-target}/release/hako"
  fi
}
