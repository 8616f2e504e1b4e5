# Helpers sourced by the launch scripts.
free_port() {  # below the ephemeral range (see vfl/ports.py)
  "$PY" -m vfl.ports
}
local_keys() {  # local_keys DIR PARTY...: a CurveZMQ key pair per party (secret keys 0600 in a 0700 DIR), made on the
  # first run and kept: a re-run on the same directory keeps its keys, so the parties' PSI caches (bound to them) apply
  local dir=$1 party; shift
  for party in "$@"; do
    [ -f "$dir/$party.key" ] && [ -f "$dir/$party.key_secret" ] || "$PY" -m vfl.keys new "$party" --dir "$dir" --force >/dev/null
  done
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
parse_flags() {  # parse_flags FLAG=VAR... -- "$@": each `FLAG VALUE` sets VAR, or the array VAR to (FLAG VALUE) where
  # given as FLAG=VAR[] (to pass on); -h/--help prints the script's header comment; a flag without its value or an
  # unknown argument is a one-line error
  local specs=() spec var
  while [ "$1" != -- ]; do specs+=("$1"); shift; done
  shift
  require_values "${specs[@]%%=*}" -- "$@"
  while [ $# -gt 0 ]; do
    case "$1" in -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;; esac
    var=""
    for spec in "${specs[@]}"; do [ "$1" != "${spec%%=*}" ] || var=${spec#*=}; done
    [ -n "$var" ] || { echo "error: unknown argument $1 (see --help)" >&2; exit 2; }
    if [[ "$var" == *"[]" ]]; then eval "${var%"[]"}=(\"\$1\" \"\$2\")"; else printf -v "$var" %s "$2"; fi
    shift 2
  done
}
launcher() {  # launcher MODULE RANKS NNODES NODE_RANK MASTER_ADDR MASTER_PORT: sets LAUNCH, the command starting the party
  local module=$1 ranks=$2 nnodes=$3 node_rank=$4 addr=$5 port=$6
  [[ "$ranks" =~ ^[1-9][0-9]{0,3}$ ]] || { echo "error: --ranks $ranks: allowed: an integer in [1, 9999]" >&2; exit 2; }
  [[ "$nnodes" =~ ^[1-9][0-9]{0,3}$ ]] || { echo "error: --nnodes $nnodes: allowed: an integer in [1, 9999]" >&2; exit 2; }
  if [ "$ranks" = 1 ] && [ "$nnodes" = 1 ]; then
    LAUNCH=("$PY" -m "$module")  # one rank: today's single process, no torch.distributed
    return
  fi
  if [ "$nnodes" != 1 ] && [ -z "$port" ]; then
    echo "error: --nnodes $nnodes needs --master-addr and --master-port (the same on every machine of this party)" >&2; exit 2
  fi
  [ -n "$port" ] || port=$(free_port)
  # gloo's rank-to-rank traffic is neither authenticated nor encrypted: without VFL_TRUSTED_RANK_NETWORK=1
  # (--trusted-rank-network) every rank refuses a master address, interface or machine beyond the loopback
  # (vfl/distributed/launch.py), and gloo stays on the loopback interface; the ranks' check, before torchrun starts
  WORLD_SIZE=$((ranks * nnodes)) RANK=0 LOCAL_WORLD_SIZE=$ranks MASTER_ADDR=$addr MASTER_PORT=$port \
    "$PY" -m vfl.distributed.launch || exit 2
  # torchrun (torch.distributed.run): RANK, WORLD_SIZE, MASTER_ADDR/PORT for every rank; one failed rank stops the others
  LAUNCH=("$PY" -m torch.distributed.run --nproc-per-node "$ranks" --nnodes "$nnodes" --node-rank "$node_rank"
          --master-addr "$addr" --master-port "$port" -m "$module")
}
stop_parties() {  # stop_parties: kill every party of NAMES/PIDS/DONE still running (by PID)
  local i
  for i in "${!PIDS[@]}"; do
    [ "${DONE[$i]}" = 1 ] || kill "${PIDS[$i]}" 2>/dev/null || true
  done
}
wait_parties() {  # wait_parties OUT: wait for NAMES/PIDS/DONE one by one as they end; if one fails, stop the others
  # and exit with its status (a follower's last lines from OUT/<name>.stdout)
  local out=$1 remaining=${#PIDS[@]} i status
  while [ "$remaining" -gt 0 ]; do
    for i in "${!PIDS[@]}"; do
      [ "${DONE[$i]}" = 1 ] && continue
      kill -0 "${PIDS[$i]}" 2>/dev/null && continue
      status=0
      wait "${PIDS[$i]}" || status=$?
      DONE[$i]=1
      remaining=$((remaining - 1))
      if [ "$status" != 0 ]; then
        echo "error: ${NAMES[$i]} exited with status $status; stopping the other parties" >&2
        [ -f "$out/${NAMES[$i]}.stdout" ] && tail -n 3 "$out/${NAMES[$i]}.stdout" >&2
        stop_parties
        wait 2>/dev/null || true
        exit "$status"
      fi
    done
    sleep 0.2
  done
}
