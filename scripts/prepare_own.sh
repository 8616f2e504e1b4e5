# Sourced by run_leader.sh / run_follower.sh: prepare_own CONFIG RAW SHARDS [prepare flags...] prepares this party's
# own raw file alone into SHARDS/<party> and prints that directory: with the columns its YAML's data.schema declares
# (python -m vfl.data prepare --config), or else Criteo-style (python -m vfl.data prepare --party).
# Categoricals as the front door prepares them: a vocabulary of values seen >= 10 times unless the flags say
# --vocab-min-count N or --hash-buckets N.
prepare_own() {
  local config=$1 raw=$2 shards=$3; shift 3
  local party has_schema
  # a YAML with data.schema declares its own table (any columns, CSV/TSV/Parquet): prepare --config reads it
  has_schema=$("$PY" -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); print(int(bool((d.get("data") or {}).get("schema"))))' "$config") || return
  if [ "$has_schema" = 1 ]; then
    local seed=()
    while [ $# -gt 0 ]; do
      case "$1" in
        --seed) seed=(--seed "$2"); shift 2 ;;
        *) echo "error: $1 does not apply to $config, whose data.schema declares each column's transform" >&2; return 2 ;;
      esac
    done
    party=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["party"])' "$config") || return
    "$PY" -m vfl.data prepare --config "$config" --input "$raw" --out "$shards" --force "${seed[@]}" >&2 || return
    echo "$shards/$party"
    return
  fi
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
