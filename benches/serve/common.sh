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

# The flags of $SERVE_ARGS that say which code the server runs (`--engine`, `--compiler`, as
# `--flag VALUE` or `--flag=VALUE`), for `hako upload` to precompile that code: a server on an
# engine or compiler the store has no code for compiles each module at its first call, which
# a measurement must not count.
upload_args() {
  local -a words
  read -r -a words <<<"${SERVE_ARGS:-}"
  local i
  for (( i = 0; i < ${#words[@]}; i++ )); do
    case "${words[i]}" in
      --engine|--compiler) printf '%s %s ' "${words[i]}" "${words[i+1]:-}"; i=$(( i + 1 )) ;;
      --engine=*|--compiler=*) printf '%s ' "${words[i]}" ;;
    esac
  done
}
