# Helpers sourced by the launch scripts.
free_port() {  # below the ephemeral range (see vfl/ports.py)
  "$PY" -m vfl.ports
}
new_keys() {  # new_keys DIR PARTY...: a throwaway CurveZMQ key pair per party (secret keys 0600 in a 0700 DIR)
  local dir=$1; shift
  rm -rf "$dir"
  for party in "$@"; do "$PY" -m vfl.keys new "$party" --dir "$dir" >/dev/null; done
}
