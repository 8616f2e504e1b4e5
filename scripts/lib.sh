# Helpers sourced by the launch scripts.
free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
new_secret() {  # a fresh 32-byte shared secret in a file only the user can read
  (umask 077; head -c 32 /dev/urandom | base64 > "$1")
}
