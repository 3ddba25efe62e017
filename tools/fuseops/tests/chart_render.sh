#!/usr/bin/env bash
# Renders bench charts in headless Chromium and counts the bars in the rendered DOM against the cases.
#   chart_render.sh FUSEOPS DATA_DIR WORK_DIR
# 1. `fuseops bench --backend cpu --cases` writes JSON, SVG and HTML directly; 2. `fuseops chart --from` renders a GPU
# fixture. For each HTML: `--dump-dom` must show one <rect class="bar"> per case, and the page's script (run by the
# browser after layout) must have counted as many bars with a non-empty box; each SVG's DOM too; a screenshot of each
# is kept in WORK_DIR for the record. Exit 77 (ctest: skipped) with the reason when no Chromium is installed.
set -euo pipefail
fuseops=$1 data=$2 work=$3
mkdir -p "$work"
rm -f "$work"/*.json "$work"/*.svg "$work"/*.html "$work"/*.png

"$fuseops" bench --backend cpu --cpu-rows 8 --quiet --cases "$data/chart-cases.yaml" \
  --json "$work/cpu.json" --svg "$work/cpu.svg" --html "$work/cpu.html"
"$fuseops" chart --from "$data/fixture-bench.json" --svg "$work/gpu.svg" --html "$work/gpu.html"

browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null; then browser=$(command -v "$b"); break; fi
done
if [ -z "$browser" ]; then
  echo "SKIP: no Chromium on this machine (Debian: apt-get install chromium); the charts were written but not rendered"
  exit 77
fi
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars --no-first-run)

cases_in() {  # results in a bench JSON written with one key per line
  grep -c '"op":' "$1"
}

fail=0
check() {  # name, expected bars
  local name=$1 expected=$2 dom bars rendered
  for kind in html svg; do
    dom=$(timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$work/$name.$kind" 2>/dev/null)
    bars=$(grep -o 'class="bar"' <<<"$dom" | wc -l)
    if [ "$bars" -ne "$expected" ]; then
      echo "FAIL: $name.$kind: $bars bars in the rendered DOM, expected $expected (one per case)"; fail=1
    else
      echo "ok: $name.$kind: $bars bars in the rendered DOM for $expected cases"
    fi
    if [ "$kind" = html ]; then
      rendered=$(grep -o 'data-rendered-bars="[0-9]*"' <<<"$dom" | grep -o '[0-9]*' || true)
      if [ "${rendered:-none}" != "$expected" ]; then
        echo "FAIL: $name.html: the page counted ${rendered:-no} laid-out bars, expected $expected"; fail=1
      else
        echo "ok: $name.html: the browser laid out $rendered bars"
      fi
    fi
    timeout 120 "$browser" "${flags[@]}" --window-size=1000,900 --screenshot="$work/$name-$kind.png" \
      "file://$work/$name.$kind" >/dev/null 2>&1 || true
    if [ ! -s "$work/$name-$kind.png" ]; then
      echo "FAIL: $name.$kind: no screenshot"; fail=1
    else
      echo "screenshot: $work/$name-$kind.png"
    fi
  done
}

n_cpu=$(cases_in "$work/cpu.json")
n_gpu=$(cases_in "$data/fixture-bench.json")
[ "$n_cpu" -gt 0 ] || { echo "FAIL: the CPU bench wrote no results"; exit 1; }
check cpu "$n_cpu"
check gpu "$n_gpu"
exit $fail
