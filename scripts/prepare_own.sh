# Sourced by run_leader.sh / run_follower.sh: prepare_own CONFIG RAW SHARDS [prepare flags...] prepares this party's
# own raw file alone (python -m vfl.data prepare --party) into SHARDS/<party> and prints that directory.
# Categoricals as the front door prepares them: a vocabulary of values seen >= 10 times unless the flags say
# --vocab-min-count N or --hash-buckets N (one of them).
prepare_own() {
  local config=$1 raw=$2 shards=$3; shift 3
  local party a buckets="" min_count="" prev=""
  for a in "$@"; do
    [ "$prev" = --hash-buckets ] && buckets=$a
    [ "$prev" = --vocab-min-count ] && min_count=$a
    prev=$a
  done
  if [ -n "$buckets" ] && [ -n "$min_count" ]; then
    echo "error: --hash-buckets $buckets and --vocab-min-count $min_count are alternatives; give one" >&2
    return 2
  fi
  [ -z "$buckets$min_count" ] && set -- "$@" --vocab-min-count 10
  party=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["party"])' "$config")
  "$PY" -m vfl.data prepare --party "$party" --input "$raw" --out "$shards" --force "$@" >&2
  echo "$shards/$party"
}
