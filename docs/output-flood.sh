#!/bin/bash
# usage: docs/output-flood.sh BINARY NAME COMMAND-JSON [SECONDS] [PODS]
# e.g.   docs/output-flood.sh target/release/probelet yes '["yes"]' 30
#        docs/output-flood.sh target/release/probelet yes20 '["yes"]' 20 20
# Runs `BINARY run` on PODS pods (default 1) whose only container runs COMMAND, waits 5 s, then
# prints the agent's CPU (utime+stime of /proc/PID/stat) over SECONDS (default 10) as a share of
# one core, the container processes' CPU over the same time, the size of the agent's log (its
# standard error), how often it counted lines not logged, and a /healthz. Everything on
# 127.0.0.1. With QUIET=1 in the environment, one more pod prints the time every 100 ms, and
# how late its lines reached the agent's log is printed too (the clock's time in the line
# against the record's).
set -u
bin=$1; name=$2; cmd=$3; secs=${4:-10}; pods=${5:-1}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for i in $(seq 1 $pods); do
  # the one-pod run keeps its pod's name
  pod=flood; [ $pods -gt 1 ] && pod=flood-$i
  cat > $dir/$pod.yaml <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $pod}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: flood
    command: $cmd
YAML
done
if [ "${QUIET:-}" = 1 ]; then
  cat > $dir/quiet.yaml <<YAML
apiVersion: v1
kind: Pod
metadata: {name: quiet}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: quiet
    command: ["sh", "-c", "while :; do date +%s.%N; sleep 0.1; done"]
YAML
fi
$bin run --manifests $dir --listen 127.0.0.1:$port > $dir/.stdout 2> $dir/.stderr &
pid=$!
sleep 5
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$1/stat 2>/dev/null || echo 0; }
# the containers: the shims' children (each shim is the agent's child)
kids=$(for s in $(ps -o pid= --ppid $pid); do ps -o pid= --ppid $s; done)
ccpu() { t=0; for k in $kids; do t=$((t + $(cpu $k))); done; echo $t; }
a=$(cpu $pid); ca=$(ccpu); sleep $secs; b=$(cpu $pid); cb=$(ccpu)
awk -v n=$name -v p=$pods -v k=$(echo $kids | wc -w) -v d=$((b-a)) -v c=$((cb-ca)) -v s=$secs -v t=$tck 'BEGIN{printf "%s: %d pods (%d container processes), agent CPU %.1f%% of a core over %ds (%d ticks), container CPU %.1f%%, ", n, p, k, 100*d/(s*t), s, d, 100*c/(s*t)}'
echo "log $(stat -c %s $dir/.stderr) bytes, $(grep -c 'lines not logged' $dir/.stderr) drop reports, healthz $(curl -s -m 5 -o /dev/null -w '%{http_code} %{time_total}s' http://127.0.0.1:$port/healthz)"
kill -TERM $pid; wait $pid
if [ "${QUIET:-}" = 1 ]; then
  python3 - $dir/.stderr <<'PY'
import datetime, re, sys
lags = []
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r'(\S+)Z\s+INFO \S+: (\d+\.\d+) pod="quiet_', line)
    if m:
        logged = datetime.datetime.fromisoformat(m.group(1) + "+00:00").timestamp()
        lags.append(logged - float(m.group(2)))
lags.sort()
if lags:
    print("quiet: %d lines, lag median %.1f ms, 99th %.1f ms, max %.1f ms" % (len(lags), 1000 * lags[len(lags) // 2], 1000 * lags[int(len(lags) * 0.99)], 1000 * lags[-1]))
else:
    print("quiet: no lines logged")
PY
fi
rm -rf $dir
