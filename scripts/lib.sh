# Helpers sourced by the launch scripts.
free_port() {  # below the ephemeral range (see vfl/ports.py)
  "$PY" -m vfl.ports
}
new_keys() {  # new_keys DIR PARTY...: a throwaway CurveZMQ key pair per party (secret keys 0600 in a 0700 DIR)
  local dir=$1; shift
  rm -rf "$dir"
  for party in "$@"; do "$PY" -m vfl.keys new "$party" --dir "$dir" >/dev/null; done
}
require_values() {  # require_values FLAG... -- "$@": a value flag that is last or followed by a flag is a clear error
  local flags=() f
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  while [ $# -gt 0 ]; do
    for f in "${flags[@]}"; do
      if [ "$1" = "$f" ] && { [ $# -lt 2 ] || [[ "$2" == --* ]]; }; then
        echo "error: $f needs a value (see --help)" >&2
        exit 2
      fi
    done
    shift
  done
}
