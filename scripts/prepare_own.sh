# Sourced by run_leader.sh / run_follower.sh: prepare_own CONFIG RAW SHARDS [prepare flags...] prepares this party's
# own raw file alone (python -m vfl.data prepare --party) into SHARDS/<party> and prints that directory.
# Categoricals as the front door prepares them: a vocabulary of values seen >= 10 times unless the flags say
# --vocab-min-count N or --hash-buckets N.
prepare_own() {
  local config=$1 raw=$2 shards=$3; shift 3
  local party
  # the flags' conflict (both given) is prepare's own one-line error
  case " $* " in
    *" --hash-buckets "*|*" --vocab-min-count "*) ;;
    *) set -- "$@" --vocab-min-count 10 ;;
  esac
  # inside $(...) errexit is off: every failure returns its status, so the caller stops on it
  party=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["party"])' "$config") || return
  "$PY" -m vfl.data prepare --party "$party" --input "$raw" --out "$shards" --force "$@" >&2 || return
  echo "$shards/$party"
}
