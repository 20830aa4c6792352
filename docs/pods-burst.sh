#!/bin/bash
# usage: docs/pods-burst.sh BINARY N [SECONDS]
# `BINARY run` on N pods, each one `sleep 4715` container with a TCP readiness probe (every 5 s)
# against the agent's own listener; `/pods` and `/healthz` timed with curl (30 s timeout) every
# 0.5 s for SECONDS (default 60), with how many containers /pods shows running and ready; then
# the agent's CPU, a SIGTERM, and how many `sleep 4715` are left. Everything on 127.0.0.1.
set -u
bin=$1; n=$2; secs=${3:-60}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for i in $(seq 1 $n); do
cat > $dir/p$i.yaml <<YAML
apiVersion: v1
kind: Pod
metadata: {name: p$i}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    command: ["sleep", "4715"]
    readinessProbe:
      tcpSocket: {port: $port}
      periodSeconds: 5
YAML
done
start=$(date +%s.%N)
$bin run --manifests $dir --listen 127.0.0.1:$port > $dir/.stdout 2> $dir/.stderr &
pid=$!
end=$(( $(date +%s) + secs ))
while [ $(date +%s) -lt $end ]; do
  t=$(echo "$(date +%s.%N) - $start" | bc)
  p=$(curl -s -m 30 -o $dir/.pods -w '%{http_code} %{time_total}' http://127.0.0.1:$port/pods)
  running=$(grep -o '"running":{' $dir/.pods 2>/dev/null | wc -l)
  ready=$(grep -o '"ready":true' $dir/.pods 2>/dev/null | wc -l)
  h=$(curl -s -m 30 -o /dev/null -w '%{http_code} %{time_total}' http://127.0.0.1:$port/healthz)
  printf 't=%5.1f pods=%s (running %s, ready %s) healthz=%s\n' $t "$p" $running $ready "$h"
  sleep 0.5
done
echo "agent CPU: $(awk -v t=$(getconf CLK_TCK) '{printf "%.1f s", ($14+$15)/t}' /proc/$pid/stat), sleeps $(pgrep -c -f '^sleep 4715')"
kill -TERM $pid; wait $pid; echo "exit $?"
sleep 1; echo "left: $(pgrep -c -f '^sleep 4715')"
rm -rf $dir
