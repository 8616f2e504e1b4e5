# Helpers sourced by the launch scripts.
free_port() {  # below the ephemeral range (see vfl/ports.py)
  "$PY" -m vfl.ports
}
new_secret() {  # a fresh 32-byte shared secret in a file only the user can read
  (umask 077; head -c 32 /dev/urandom | base64 > "$1")
}
