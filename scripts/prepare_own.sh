# Sourced by run_leader.sh / run_follower.sh: prepare_own CONFIG RAW SHARDS [prepare flags...] prepares this party's
# own raw file alone (python -m vfl.data prepare --party) into SHARDS/<party> and prints that directory.
prepare_own() {
  local config=$1 raw=$2 shards=$3; shift 3
  local party
  party=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["party"])' "$config")
  "$PY" -m vfl.data prepare --party "$party" --input "$raw" --out "$shards" --force "$@" >&2
  echo "$shards/$party"
}
