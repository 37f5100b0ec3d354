# Sourced by scripts/test: a clock for each stage of a run, and jobs run beside each other.
#
#   stage NAME CMD...     run CMD in the foreground; record its seconds and exit status
#   stage_bg NAME CMD...  start CMD in the background, its output kept in a log (shown when it
#                         is collected, so interleaved jobs never mix their lines)
#   stage_wait            collect every background stage: print its log, record it
#   stage_table           the table of every stage (name, seconds, status) and the total; also
#                         written to .stage-times (the last run's, for docs/internals.md)
#   stage_status          0 when every stage passed, 1 otherwise
#
# A failed stage does not stop the run: the table shows every stage, and the run fails at the end.
stage_names=() stage_secs=() stage_codes=() stage_pids=() stage_bg_names=() stage_bg_starts=()
stage_logs_dir=$(mktemp -d "${TMPDIR:-/tmp}/shmwin-stages.XXXXXX")
stage_started=$SECONDS

stage() {
  local name=$1 started=$SECONDS code=0
  shift
  echo "== stage: $name"
  "$@" || code=$?
  stage_names+=("$name") stage_secs+=($((SECONDS - started))) stage_codes+=("$code")
  return 0
}

stage_bg() {
  local name=$1
  shift
  echo "== stage (in the background): $name"
  local i=${#stage_pids[@]}
  # the job writes its own seconds when it ends, so the table shows them, not its collection's
  (started=$SECONDS code=0; "$@" || code=$?; echo $((SECONDS - started)) >"$stage_logs_dir/$i.secs"
   exit "$code") >"$stage_logs_dir/$i.log" 2>&1 &
  stage_pids+=($!) stage_bg_names+=("$name") stage_bg_starts+=("$SECONDS")
}

stage_wait() {
  local i code
  for i in "${!stage_pids[@]}"; do
    code=0
    wait "${stage_pids[$i]}" || code=$?
    echo "== stage (from the background): ${stage_bg_names[$i]}"
    cat "$stage_logs_dir/$i.log"
    stage_names+=("${stage_bg_names[$i]} (bg)") stage_codes+=("$code")
    stage_secs+=("$(cat "$stage_logs_dir/$i.secs" 2>/dev/null || echo $((SECONDS - stage_bg_starts[i])))")
  done
  stage_pids=() stage_bg_names=() stage_bg_starts=()
  rm -f "$stage_logs_dir"/*.log "$stage_logs_dir"/*.secs
}

stage_table() {
  local i out
  out=$(
    printf '%-44s %8s  %s\n' "stage" "seconds" "status"
    for i in "${!stage_names[@]}"; do
      printf '%-44s %8d  %s\n' "${stage_names[$i]}" "${stage_secs[$i]}" \
        "$([ "${stage_codes[$i]}" = 0 ] && echo ok || echo "FAILED (${stage_codes[$i]})")"
    done
    printf '%-44s %8d\n' "total (wall clock)" $((SECONDS - stage_started))
  )
  echo "== stage times"
  echo "$out"
  echo "$out" >.stage-times
  rmdir "$stage_logs_dir" 2>/dev/null || true
}

stage_status() {
  local code
  for code in "${stage_codes[@]}"; do [ "$code" = 0 ] || return 1; done
  return 0
}
