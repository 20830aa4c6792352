#!/bin/bash
# usage: docs/pods-burst-once.sh BINARY N [PATH]
# The pods of docs/pods-burst.sh; one `GET PATH` (default /pods) 0.5 s after the agent first
# answers /healthz, timed, with each thread's CPU (utime+stime in clock ticks) before and after.
set -u
bin=$1; n=$2; path=${3:-/pods}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for i in $(seq 1 $n); do
printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: p%d}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    command: ["sleep", "4715"]\n    readinessProbe:\n      tcpSocket: {port: %d}\n      periodSeconds: 5\n' $i $port > $dir/p$i.yaml
done
$bin run --manifests $dir --listen 127.0.0.1:$port > $dir/.stdout 2> $dir/.stderr &
pid=$!
until curl -s -o /dev/null http://127.0.0.1:$port/healthz; do sleep 0.1; done
threads() { for t in /proc/$pid/task/*; do printf '%s=%s ' "$(cat $t/comm)" "$(awk '{print $14+$15}' $t/stat)"; done; echo; }
sleep 0.5
echo "before: $(threads)"
curl -s -m 60 -o /dev/null -w "$path: %{time_total}s\n" http://127.0.0.1:$port$path
echo "after:  $(threads)"
kill -TERM $pid; wait $pid; sleep 1; echo "left: $(pgrep -c -f '^sleep 4715')"
rm -rf $dir
