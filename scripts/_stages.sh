# Sourced by scripts/test: a clock for each stage of a run, and jobs run beside each other.
#
#   stage NAME CMD...     run CMD in the foreground; record its seconds and exit status
#   stage_bg NAME CMD...  start CMD in the background, its output kept in a log (shown when it
#                         is collected, so interleaved jobs never mix their lines)
#   stage_wait            collect every background stage: print its log, record it
#   stage_wait --done     collect only those that have ended (the others keep running)
#   stage_table           the table of every stage (name, seconds, CPU-seconds, status) and the
#                         totals; also written to .stage-times (the last run's, for docs/internals.md)
#   stage_status          0 when every stage passed, 1 otherwise
#   stage_cpu_ms          the CPU (user + sys, ms) of this shell and every child it has waited for
#
# CPU-seconds: each stage runs in a subshell that reads bash's `times` when its command ends, so
# they count every process of the stage's tree that was waited for (pytest's workers, their
# children, the compilers), not a daemon that detached itself. On a machine shared with other
# work the wall clock stretches but the CPU-seconds hardly move: the run cannot be shorter than
# their total over the 2 cores, and the table prints that bound.
#
# A failed stage does not stop the run: the table shows every stage, and the run fails at the end.
stage_names=() stage_secs=() stage_cpus=() stage_codes=() stage_pids=() stage_bg_names=() stage_bg_starts=()
stage_bg_keys=() stage_bg_count=0  # each background job's files: $stage_logs_dir/KEY.{log,secs,cpu}
stage_logs_dir=$(mktemp -d "${TMPDIR:-/tmp}/shmwin-stages.XXXXXX")
stage_started=$SECONDS

stage_cpu_ms() {  # `times`: "0m1.250s 0m0.030s" (the shell), then the same for its children
  local total=0 field minutes seconds file="$stage_logs_dir/times.$BASHPID"
  times >"$file"  # not through $(...): a subshell's own times are nought
  for field in $(cat "$file"); do
    minutes=${field%%m*} seconds=${field#*m} seconds=${seconds%s}
    total=$((total + minutes * 60000 + 10#${seconds%.*} * 1000 + 10#${seconds#*.}))
  done
  rm -f "$file"
  echo "$total"
}

stage() {
  local name=$1 started=$SECONDS code=0
  shift
  echo "== stage: $name"
  # in a subshell, so that its CPU is its own (a background stage reaped meanwhile is not counted)
  ("$@" || code=$?; stage_cpu_ms >"$stage_logs_dir/fg.cpu"; exit "$code") || code=$?
  stage_names+=("$name") stage_secs+=($((SECONDS - started))) stage_codes+=("$code")
  stage_cpus+=("$(cat "$stage_logs_dir/fg.cpu" 2>/dev/null || echo 0)")
  return 0
}

stage_bg() {
  local name=$1 key=$((stage_bg_count++))
  shift
  echo "== stage (in the background): $name"
  # the job writes its own seconds when it ends, so the table shows them, not its collection's
  (started=$SECONDS code=0; "$@" || code=$?; echo $((SECONDS - started)) >"$stage_logs_dir/$key.secs"
   stage_cpu_ms >"$stage_logs_dir/$key.cpu"; exit "$code") >"$stage_logs_dir/$key.log" 2>&1 &
  stage_pids+=($!) stage_bg_names+=("$name") stage_bg_starts+=("$SECONDS") stage_bg_keys+=("$key")
}

stage_wait() {
  local i code key pids=() names=() starts=() keys=()
  for i in "${!stage_pids[@]}"; do
    key=${stage_bg_keys[$i]}
    # a job writes its .cpu file last, as it ends: --done leaves those without one running
    if [ "${1:-}" = --done ] && [ ! -f "$stage_logs_dir/$key.cpu" ]; then
      pids+=("${stage_pids[$i]}") names+=("${stage_bg_names[$i]}") starts+=("${stage_bg_starts[$i]}") keys+=("$key")
      continue
    fi
    code=0
    wait "${stage_pids[$i]}" || code=$?
    echo "== stage (from the background): ${stage_bg_names[$i]}"
    cat "$stage_logs_dir/$key.log"
    stage_names+=("${stage_bg_names[$i]} (bg)") stage_codes+=("$code")
    stage_secs+=("$(cat "$stage_logs_dir/$key.secs" 2>/dev/null || echo $((SECONDS - stage_bg_starts[i])))")
    stage_cpus+=("$(cat "$stage_logs_dir/$key.cpu" 2>/dev/null || echo 0)")
    rm -f "$stage_logs_dir/$key".{log,secs,cpu}
  done
  stage_pids=("${pids[@]}") stage_bg_names=("${names[@]}") stage_bg_starts=("${starts[@]}") stage_bg_keys=("${keys[@]}")
}

stage_table() {
  local i out cpu_ms=0
  out=$(
    printf '%-44s %8s %8s  %s\n' "stage" "seconds" "CPU-s" "status"
    for i in "${!stage_names[@]}"; do
      cpu_ms=$((cpu_ms + stage_cpus[i]))
      printf '%-44s %8d %8d  %s\n' "${stage_names[$i]}" "${stage_secs[$i]}" $((stage_cpus[i] / 1000)) \
        "$([ "${stage_codes[$i]}" = 0 ] && echo ok || echo "FAILED (${stage_codes[$i]})")"
    done
    printf '%-44s %8d %8d\n' "total (wall clock; CPU of every stage)" $((SECONDS - stage_started)) $((cpu_ms / 1000))
    printf '%-44s %8d\n' "the CPU's bound on $(nproc) cores (CPU-s / cores)" $((cpu_ms / 1000 / $(nproc)))
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
