# Shared helpers of benchmarks/train/*.sh (sourced, not run).

# Busy CPU time of the whole machine so far, in clock ticks (user+nice+system+irq+softirq+steal).
machine_busy_ticks() {
  awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}

# Percentage of the machine's CPUs that other processes used while `measure` ran its command:
# the machine's busy time minus the command's own user+system time, over wall x cores.
others_percent() {  # busy_before busy_after wall_s own_cpu_s
  awk -v b0="$1" -v b1="$2" -v wall="$3" -v own="$4" -v hz="$(getconf CLK_TCK)" \
      -v cores="$(nproc)" 'BEGIN {
        p = ((b1 - b0) / hz - own) / (wall * cores) * 100; if (p < 0) p = 0; printf "%.0f", p }'
}

# Waits (up to QUIET_WAIT seconds, default 300) until other processes use less than QUIET_PCT
# percent (default 15) of the machine over a 2 s window. Prints what it saw to stderr.
wait_quiet() {
  local limit=${QUIET_WAIT:-300} threshold=${QUIET_PCT:-15} waited=0 b0 b1 pct
  while :; do
    b0=$(machine_busy_ticks)
    sleep 2
    b1=$(machine_busy_ticks)
    pct=$(others_percent "$b0" "$b1" 2 0)
    if [ "$pct" -lt "$threshold" ] || [ "$waited" -ge "$limit" ]; then
      [ "$waited" -ge "$limit" ] && echo "  (not quiet after ${waited}s: ${pct}% busy; measuring anyway)" >&2
      return 0
    fi
    waited=$((waited + 2))
  done
}

# measure LOG CMD...: runs CMD with stdout+stderr to LOG and sets MEASURED_WALL (s, from the
# nanosecond clock around /usr/bin/time),
# MEASURED_RSS_KIB, MEASURED_OTHERS (percent of the machine used by other processes meanwhile)
# and MEASURED_RC.
measure() {
  local log=$1 timefile b0 b1 t0 t1 user sys
  shift
  timefile=$(mktemp)
  b0=$(machine_busy_ticks)
  MEASURED_RC=0
  t0=$(date +%s%N)
  /usr/bin/time -o "$timefile" -f "%M %U %S" "$@" >"$log" 2>&1 || MEASURED_RC=$?
  t1=$(date +%s%N)
  b1=$(machine_busy_ticks)
  MEASURED_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
  read -r MEASURED_RSS_KIB user sys < <(tail -n 1 "$timefile")
  rm -f "$timefile"
  MEASURED_OTHERS=$(others_percent "$b0" "$b1" "$MEASURED_WALL" \
    "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')")
}

# median and max of the numbers on stdin, as "median max"
median_max() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "nan nan"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[NR] }'
}

# snapshot_binaries DIR FILE...: copies the binaries a benchmark runs into DIR (the build
# directory may be rebuilt while a long benchmark runs) and prints their build times.
snapshot_binaries() {
  local dir=$1 file
  shift
  mkdir -p "$dir"
  for file in "$@"; do
    cp -p "$file" "$dir/"
    echo "  $(basename "$file"): built $(date -r "$file" '+%F %T')" >&2
  done
}

# measure_quietest LOG CMD...: `measure` after wait_quiet; when other processes used more than
# NOISY_PCT percent of the machine (default 20) meanwhile, runs it again, up to RETRIES more
# times (default 2), and keeps the run during which they used the least (its log as LOG; every
# attempt stays as LOG.N). Sets the MEASURED_* variables of the kept run and MEASURED_ATTEMPTS.
measure_quietest() {
  local log=$1 attempt best_attempt=0 best_others=1000 best=()
  shift
  for attempt in $(seq 0 "${RETRIES:-2}"); do
    wait_quiet
    measure "$log.$attempt" "$@"
    [ "$MEASURED_RC" -eq 0 ] || { cp "$log.$attempt" "$log"; return 0; }
    echo "  attempt $attempt: ${MEASURED_WALL}s, others ${MEASURED_OTHERS}%" >&2
    if [ "$MEASURED_OTHERS" -lt "$best_others" ]; then
      best_attempt=$attempt best_others=$MEASURED_OTHERS
      best=("$MEASURED_WALL" "$MEASURED_RSS_KIB" "$MEASURED_OTHERS")
    fi
    [ "$MEASURED_OTHERS" -gt "${NOISY_PCT:-20}" ] || break
  done
  MEASURED_ATTEMPTS=$((attempt + 1))
  cp "$log.$best_attempt" "$log"
  MEASURED_WALL=${best[0]} MEASURED_RSS_KIB=${best[1]} MEASURED_OTHERS=${best[2]}
}
