#!/usr/bin/env bash
# The GPU machine's script: runs the stages named on the command line (default: all) with binaries built on a
# development machine and carried in $FUSEOPS_BIN (default .carry/bin; make them with scripts/build-carry.sh:
# the GPU image has no GoogleTest, CLI11 or nlohmann-json; carry .pack, which build-carry.sh fills), and writes logs
# and tables under $OUT.
#
#   stages: info tests sanitizer check bench flaggems fla baseline:<bench/baselines script> ab cases torch
#   scripts/gpu.sh info tests sanitizer check      # one device command (< 10 min)
#   scripts/gpu.sh bench flaggems                  # a second one
#
# flaggems and fla need .baselines (../shared/tools/prepare-baselines.sh) and the bench stage's bench.json in $OUT.
# Extra arguments for `fuseops check` / `fuseops bench` (e.g. --set gdn-kkt-solve): FUSEOPS_CHECK_ARGS, FUSEOPS_BENCH_ARGS.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fuseops-out}
BIN=${FUSEOPS_BIN:-.carry/bin}
mkdir -p "$OUT"
# Binaries and baselines carried packed (scripts/build-carry.sh): unpack what is missing.
[ -f .pack/bin.tar.xz ] && [ ! -x "$BIN/fuseops" ] && mkdir -p .carry && tar xJf .pack/bin.tar.xz -C .carry
[ -f .pack/baselines.tar.xz ] && [ ! -d .baselines ] && tar xJf .pack/baselines.tar.xz
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(info tests sanitizer check bench flaggems)
status=0
note="fuseops ${FUSEOPS_COMMIT:-unknown commit}; command: scripts/gpu.sh ${stages[*]}"

run_stage() {  # name, command...
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*"
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.log"
  echo "=== $name: exit $rc after $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || status=1
}

for stage in "${stages[@]}"; do
  case $stage in
    info)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
      "$BIN/fuseops" --version; "$BIN/fuseops" list | head -3 ;;
    tests)
      run_stage tests "$BIN/fuseops_tests" --gtest_color=no ;;
    sanitizer)
      # A reduced suite: the CUDA tests without the multi-GiB cases, then a check set, under memcheck.
      run_stage sanitizer timeout 300 bash -c "compute-sanitizer --tool memcheck --error-exitcode 3 $BIN/fuseops_tests \
          --gtest_color=no --gtest_filter='*Cuda*:*cuda*:*Device*:-*Large*:*large*' && \
        compute-sanitizer --tool memcheck --error-exitcode 3 $BIN/fuseops check --backend cuda --set activation-dtypes" ;;
    check)
      run_stage check "$BIN/fuseops" check --backend cuda --json "$OUT/check.json" ${FUSEOPS_CHECK_ARGS:-} ;;
    bench)
      run_stage bench "$BIN/fuseops" bench --json "$OUT/bench.json" --md "$OUT/bench.md" --note "$note" ${FUSEOPS_BENCH_ARGS:-} ;;
    flaggems)
      run_stage flaggems env PYTHONPATH=.baselines/flaggems/src:.baselines/pylib PYTHONUNBUFFERED=1 \
        python3 bench/baselines/flaggems_activation.py "$OUT/bench.json" "$OUT/flaggems.md" ;;
    fla)
      run_stage fla env PYTHONPATH=.baselines FLA_FLASH_QLA=0 PYTHONUNBUFFERED=1 \
        python3 bench/baselines/fla_kkt_solve.py "$OUT/bench.json" "$OUT/fla.md" ;;
    baseline:*)
      # Any side-by-side script of bench/baselines on the bench stage's results: baseline:flaggems_moe, baseline:fla_norm
      script=${stage#baseline:}
      case $script in
        flaggems_*) path=.baselines/flaggems/src:.baselines/pylib ;;
        *) path=.baselines ;;
      esac
      run_stage "$script" env PYTHONPATH=$path FLA_FLASH_QLA=0 PYTHONUNBUFFERED=1 \
        timeout "${FUSEOPS_BASELINE_TIMEOUT:-240}" python3 "bench/baselines/$script.py" "$OUT/bench.json" "$OUT/$script.md" ;;
    ab)
      # A/B of binaries in one lease: FUSEOPS_AB="base=.pack/fuseops-base.xz new=.carry/bin/fuseops" (a .xz is
      # unpacked first), each run FUSEOPS_AB_RUNS times (default 2) in alternation with FUSEOPS_BENCH_ARGS; the side-
      # by-side table (medians, cold ratios to the first label) in $OUT/ab.md (bench/ab.py), the runs' tables packed.
      # A binary may carry settings: FUSEOPS_AB="on=.carry/bin/fuseops off=FUSEOPS_GDN_FWD_HO=0:.carry/bin/fuseops".
      abdir=$(mktemp -d); abargs=()
      for r in $(seq "${FUSEOPS_AB_RUNS:-2}"); do
        for spec in ${FUSEOPS_AB:?set FUSEOPS_AB=\"label=binary ...\"}; do
          label=${spec%%=*}; bin=${spec#*=}; envs=()
          if [[ $bin == *:* ]]; then  # label=VAR=VAL,VAR=VAL:binary: the binary run with those settings
            IFS=, read -r -a envs <<< "${bin%%:*}"; bin=${bin#*:}
          fi
          if [[ $bin == *.xz ]]; then
            [ -x "$abdir/$label" ] || { xz -dc "$bin" > "$abdir/$label" && chmod +x "$abdir/$label"; }
            bin=$abdir/$label
          fi
          run_stage "ab_${label}_$r" env "${envs[@]}" "$bin" bench --quiet --md "$abdir/$label-$r.md" \
            ${FUSEOPS_BENCH_ARGS:-}
          abargs+=("$label=$abdir/$label-$r.md")
        done
      done
      python3 bench/ab.py "$OUT/ab.md" "${abargs[@]}" | tail -n 40
      (cd "$abdir" && tar czf "$OUT/ab-runs.tar.gz" ./*.md) ;;
    cases)
      # The example case files (check on the GPU, bench with charts) and the model layers.
      run_stage cases_check "$BIN/fuseops" check --backend cuda --quiet $(printf -- '--cases %s ' bench/cases/*.yaml)
      run_stage cases_bench "$BIN/fuseops" bench --quiet --cases bench/cases/qwen3-next-80b.yaml \
        --json "$OUT/cases.json" --html "$OUT/cases.html" --svg "$OUT/cases.svg"
      for m in qwen3-next-80b llama3-8b deepseek-v3; do
        run_stage "model_$m" "$BIN/fuseops" model "$m" --quiet --json "$OUT/model-$m.json"
      done ;;
    torch)
      # The PyTorch extension: build and install it here (torch, scikit-build-core and nvcc are on the image),
      # then its pytest suite and the Python benchmark.
      run_stage torch_install python3 -m pip install --no-build-isolation --no-deps --no-index -v .
      run_stage torch_tests env PYTHONUNBUFFERED=1 python3 -m pytest tests/python -rs -q -p no:cacheprovider
      run_stage torch_bench env PYTHONUNBUFFERED=1 python3 -m fuseops.bench --md "$OUT/torch_bench.md" ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
# At most 8 files come back from a device run: keep the Markdown tables, pack the rest (logs, JSON, charts).
archive="logs-$(IFS=-; echo "${stages[*]}" | tr -c 'A-Za-z0-9_.\n-' '_').tar.gz"
(cd "$OUT" && files=$(ls ./*.log ./*.json ./*.svg ./*.html ./*.png 2>/dev/null || true) && [ -n "$files" ] &&
  tar czf "$archive" $files && rm -f $files)
exit $status
