#!/usr/bin/env bash
# The command line's answers to mistakes, exit status and message (what GoogleTest cannot see: main() and CLI11).
#   cli_errors.sh FUSEOPS WORK_DIR
# Each `expect STATUS TEXT -- COMMAND...` runs the command and fails unless it exits with STATUS and its output
# (stdout + stderr) contains TEXT.
set -uo pipefail
fuseops=$1 work=$2
mkdir -p "$work"
failed=0

expect() {
  local status=$1 text=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$status" ] || [[ "$out" != *"$text"* ]]; then
    echo "FAIL: $* -> exit $rc (expected $status), output:"
    echo "$out" | tail -n 5
    echo "  (expected to contain: $text)"
    failed=1
  else
    echo "ok: $*"
  fi
}

# an unknown subcommand is named, with the valid ones (CLI11 said only "A subcommand is required")
expect 2 'unknown subcommand "bogus" (valid: list, check, bench, chart, model' -- "$fuseops" bogus
expect 2 'A subcommand is required' -- "$fuseops"
# also before or after --help (it printed the main help and exited 0: `X --help` seemed to say X exists)
expect 2 'unknown subcommand "info" (valid: list' -- "$fuseops" info --help
expect 2 'unknown subcommand "chekc"' -- "$fuseops" --help chekc
expect 0 'run cases on a backend' -- "$fuseops" check --help
expect 0 'fused LLM operators' -- "$fuseops" --help -- check   # past "--" no word is a subcommand
# model --list NAME lists that model only; an unknown NAME is an error
out=$("$fuseops" model --list llama3-8b)
if [[ "$out" != *llama3-8b* ]] || [[ "$out" == *deepseek-v3* ]]; then echo "FAIL: model --list llama3-8b: $out"; failed=1; fi
expect 2 'unknown model "gpt"' -- "$fuseops" model --list gpt
# --list runs nothing: the run options are errors with it (they were ignored)
expect 2 '--list excludes --tokens' -- "$fuseops" model --list llama3-8b --tokens 5
# model without NAME: the list and a usage error (its run options would otherwise be ignored)
expect 2 'model: give a model NAME (one of the list above)' -- "$fuseops" model --tokens 100
# integer options take decimal digits (1e3 was "not in range")
expect 2 '--tokens: expected a decimal integer, got "1e3"' -- "$fuseops" model qwen3-next-80b --tokens 1e3
expect 2 '--cpu-rows: expected a decimal integer, got "-5"' -- "$fuseops" check --set norm --cpu-rows -5
# leading zeros are decimal (CLI11 read 010 as octal 8 and rejected 08 as out of range)
expect 0 '10x14336' -- "$fuseops" model llama3-8b --tokens 010 --check-rows 2 --backend cpu --quiet
expect 0 '8x14336' -- "$fuseops" model llama3-8b --tokens 08 --check-rows 2 --backend cpu --quiet
# a case file is read up to 16 MiB (/dev/zero was read until memory ran out)
expect 2 'is larger than 16 MiB' -- "$fuseops" check --cases /dev/zero
# ... and so is a saved bench result (an endless pipe was read for ever, a long string until std::bad_alloc)
expect 2 '--from: /dev/stdin is larger than 16 MiB' -- \
  bash -c 'yes " " | timeout 30 "$1" chart --from /dev/stdin --svg "$2"' _ "$fuseops" "$work/big.svg"
expect 2 '--from: /dev/zero is larger than 16 MiB' -- "$fuseops" chart --from /dev/zero --svg "$work/big.svg"
# empty names and output paths are errors in every command (model and chart took them as "none")
expect 2 'name: expected a non-empty value' -- "$fuseops" model ''
expect 2 'name: expected a non-empty value' -- "$fuseops" model --list ''
expect 2 '--json: expected a non-empty value' -- "$fuseops" model llama3-8b --json ''
# --note must be UTF-8 (a byte that is not failed only when the JSON was written, leaving it empty)
expect 2 '--note: expected UTF-8 text, got the byte 0xff at character 3' -- \
  "$fuseops" bench --set norm --cpu-rows 1 --note $'ab\xff'
# ... and its faults are placed by character, not by byte offset (U+0085 is the third character, at byte 6)
expect 2 '--note: expected one line of text, got the control character U+0085 at character 3' -- \
  "$fuseops" bench --set norm --cpu-rows 1 --note $'\U0001F600\u00e9\u0085'
expect 2 '--note: expected UTF-8 text, got the byte 0xff at character 2' -- \
  "$fuseops" bench --set norm --cpu-rows 1 --note $'\u00e9\xff'
# an empty --filter / --shape is an error, not every case
expect 2 '--filter: expected a non-empty value' -- "$fuseops" check --set norm --filter ''
expect 2 '--shape: expected a non-empty value' -- "$fuseops" bench --backend cpu --set norm --shape ''
# the JSON outputs hold the seed as a number and as a string (jq 1.6 and JavaScript round numbers above 2^53: a clock
# seed such as 18446744073709551615 would replay as another)
for cmd in "check --set norm --cpu-rows 2" "model llama3-8b --tokens 2 --check-rows 2 --backend cpu"; do
  rm -f "$work/seed.json"
  expect 0 'seed 18446744073709551615' -- "$fuseops" $cmd --quiet --seed 18446744073709551615 --json "$work/seed.json"
  if ! grep -q '"seed_text": *"18446744073709551615"' "$work/seed.json"; then
    echo "FAIL: $cmd --json has no seed_text \"18446744073709551615\""; failed=1
  fi
done
# seeds are decimal; FUSEOPS_SEED= (empty) counts as unset
expect 2 '--seed: expected a decimal integer seed in [0, 2^64 - 1], got "0x10"' -- \
  "$fuseops" check --set norm --seed 0x10
expect 0 'seed 10 (replay with --seed 10)' -- "$fuseops" check --set norm --cpu-rows 2 --quiet --seed 010
expect 0 'seed 10 (replay with --seed 10)' -- env FUSEOPS_SEED=010 "$fuseops" check --set norm --cpu-rows 2 --quiet
expect 2 'FUSEOPS_SEED: expected a decimal integer seed' -- env FUSEOPS_SEED=0x10 "$fuseops" check --set norm
expect 0 'check: 10 passed, 0 failed' -- env FUSEOPS_SEED= "$fuseops" check --set norm --cpu-rows 2 --quiet
expect 2 '--seed: expected a decimal integer seed in [0, 2^64 - 1], got ""' -- "$fuseops" check --set norm --seed ''
# --filter takes the public op name (fuseops list) as well as the printed one
expect 0 'check: 10 passed' -- "$fuseops" check --set norm --filter layer_norm_fwd --cpu-rows 2 --quiet
# a filter that matches no case is an error, reported before any header (check and bench alike), listing the ops of
# the cases the other selectors kept
expect 2 '--filter "nomatch": no selected case'"'"'s op matches it; the ops of the selected cases' -- \
  "$fuseops" check --set norm --filter nomatch
expect 2 'other text selects the cases whose names contain it): kkt_solve' -- "$fuseops" check --set gdn-kkt-solve --filter solve_tril
out=$("$fuseops" check --set norm --filter nomatch 2>&1)
if [[ "$out" == *"fuseops check: backend"* ]]; then echo "FAIL: check with no matching case printed a header: $out"; failed=1; fi
expect 2 '--filter "nomatch": no selected case' -- "$fuseops" bench --backend cpu --set norm --filter nomatch
# with neither the shape nor the filter matching, the plain message
expect 2 'no case matched (--set / --cases / --filter / --shape)' -- \
  "$fuseops" check --set gdn-kkt-solve --filter solve_tril --shape 1x3
# a --shape no selected case has lists the shapes those cases print (it said only "no case matched")
expect 2 '--shape "1x2xx3": no selected case has this shape; it takes a shape as printed, one of: ' -- \
  "$fuseops" check --set gdn-kkt-solve --shape 1x2xx3
expect 2 '1x256x8x128, 1x512x8x128' -- "$fuseops" bench --backend cpu --set gdn-kkt-solve --shape abc
# a run that fails before any case leaves no empty output file behind (the early writability check made one)
rm -f "$work/none.json" "$work/none.md"
expect 2 'no selected case' -- "$fuseops" bench --backend cpu --set norm --filter nomatch --json "$work/none.json" \
  --md "$work/none.md"
if [ -e "$work/none.json" ] || [ -e "$work/none.md" ]; then echo "FAIL: a failed bench left an output file"; failed=1; fi
# ... also through a symbolic link to a file not yet there: the link stays, no target is left; a run that succeeds
# writes through the link
rm -f "$work/target.json" "$work/link.json" && ln -s target.json "$work/link.json"
expect 2 'no selected case' -- "$fuseops" check --set norm --filter nomatch --json "$work/link.json"
if [ ! -L "$work/link.json" ] || [ -e "$work/target.json" ]; then
  echo "FAIL: a failed check removed the --json link or left its target"; failed=1
fi
expect 0 'check: 10 passed' -- "$fuseops" check --set norm --cpu-rows 2 --quiet --json "$work/link.json"
if [ ! -L "$work/link.json" ] || [ ! -s "$work/target.json" ]; then
  echo "FAIL: check did not write through the --json link"; failed=1
fi
# an allocation that fails (host memory capped by ulimit -v) fails its case by name; the run goes on. Not under
# AddressSanitizer, which needs more address space than the cap to start.
printf 'cases:\n  - op: silu_and_mul\n    tokens: 400000000\n    d: 1000\n' > "$work/big.yaml"
out=$(bash -c 'ulimit -v 4000000 && exec "$0" check --backend cpu --cpu-rows 1000000 --quiet --cases "$1"' \
  "$fuseops" "$work/big.yaml" 2>&1)
rc=$?
if [[ "$out" == *Sanitizer* ]] || [[ "$out" == *ASan* ]]; then
  echo "skip: the host-memory cap under AddressSanitizer"
elif [ "$rc" -ne 1 ] || [[ "$out" != *"silu_and_mul 400000000x1000 bf16: out of host memory (std::bad_alloc)"* ]]; then
  echo "FAIL: a case out of host memory -> exit $rc: $(echo "$out" | tail -n 3)"
  failed=1
else
  echo "ok: a case out of host memory is named"
fi
# the CPU header says which cases keep more rows than --cpu-rows (kkt_solve of a batch of 2 ran 2 rows under "at most 1
# rows per case"), and the row count in the singular
out=$("$fuseops" check --backend cpu --set gdn-kkt-solve --shape 2x2048x4x128 --cpu-rows 1 --quiet 2>&1)
if [[ "$out" != *"at most 1 row per case (reduced sizes; "*"a fixed-length GDN intra-chunk case keeps at least two sequences"* ]] || \
   ! [[ "$out" =~ kkt_solve\ +2x2048x4x128\ +bf16\ +2\  ]]; then
  echo "FAIL: check --cpu-rows 1 header: $out"; failed=1
fi
expect 0 'at most 2 rows per case (reduced sizes; ' -- "$fuseops" bench --backend cpu --set norm --cpu-rows 2 --quiet
# a case file given twice (also by another path) runs once, as a set named twice does
printf 'cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 64\n' > "$work/one.yaml"
expect 0 'check: 1 passed' -- "$fuseops" check --backend cpu --quiet --cases "$work/one.yaml" --cases "$work/../$(basename "$work")/one.yaml"
# a size an op refuses: the op is rejected, out of the total, and the run fails
expect 1 '0 missing, 3 rejected' -- "$fuseops" model llama3-8b --tokens 16777216 --batch 65536 --check-rows 2 --quiet
# outputs never overwrite an input or each other
printf '{"results": []}\n' > "$work/b.json"
expect 2 '--svg: '"$work"'/b.json is the same file as the input --from' -- \
  "$fuseops" chart --from "$work/b.json" --svg "$work/b.json"
expect 2 'is the same file as the output --svg' -- "$fuseops" chart --from "$work/b.json" --svg "$work/x" --html "$work/x"
expect 2 '--svg: expected a non-empty value' -- "$fuseops" chart --from "$work/b.json" --svg '' --html "$work/y.html"
# a NUL byte in --from is an error at its place, as in a case file (the JSON reader ended there: a second result
# after it was silently ignored, a NUL inside one was "unexpected end of input")
one='{"command": "bench", "results": [{"op": "x", "shape": "1", "cold_us": 1.0}]}'
{ printf '%s\n' "$one"; printf '\0'; printf '%s\n' "$one"; } > "$work/nul.json"
expect 2 "--from: $work/nul.json:2:1: the file contains a NUL byte: expected a JSON text file" -- \
  "$fuseops" chart --from "$work/nul.json" --svg "$work/nul.svg"
printf '{"command": "bench",\n "results"\0: []}' > "$work/nul2.json"
expect 2 "--from: $work/nul2.json:2:11: the file contains a NUL byte" -- \
  "$fuseops" chart --from "$work/nul2.json" --svg "$work/nul.svg"
expect 2 '--note: it goes into the --md / --json output' -- "$fuseops" bench --backend cpu --set norm --note x
expect 2 '--note: expected one line of text' -- "$fuseops" bench --backend cpu --set norm --note $'a\nb'
# ... a C1 control character too (U+009B, a terminal's CSI, was accepted where C0 was not)
expect 2 '--note: expected one line of text, got the control character U+009B at character 2' -- \
  "$fuseops" bench --backend cpu --set norm --json "$work/note.json" --note $'a\xc2\x9b31mb'
# control characters in paths and in a result's fields reach messages escaped (only names were): a case file's
# path in its error, --from in chart's status line, an op in a chart error, a --cases path that does not exist
printf 'cases:\n  - op: silu_and_mul\n    bogus: 1\n' > "$work/"$'e\x1b[31mX.yaml'
expect 2 'e\x1b[31mX.yaml:3:5: key "bogus"' -- "$fuseops" check --backend cpu --cases "$work/"$'e\x1b[31mX.yaml'
one='{"command": "bench", "results": [{"op": "x", "shape": "1", "cold_us": 1.0}]}'
printf '%s\n' "$one" > "$work/"$'r\x1b]0;pwn\x07.json'
expect 0 'chart: 1 cases from '"$work"'/r\x1b]0;pwn\x07.json -> ' -- \
  "$fuseops" chart --from "$work/"$'r\x1b]0;pwn\x07.json' --svg "$work/esc.svg"
printf '{"command": "bench", "results": [{"op": "x\\u001b[31m", "shape": "1", "cold_us": -1}]}' > "$work/esc.json"
expect 2 'results[0] (x\x1b[31m 1): "cold_us" is negative' -- "$fuseops" chart --from "$work/esc.json" --svg "$work/esc.svg"
expect 2 'File does not exist: nope\x1b[31m.yaml' -- "$fuseops" check --cases $'nope\x1b[31m.yaml'
raw_control() {  # fails where the command's output holds a raw BEL or ESC (whatever its exit status)
  local out
  out=$("$@" 2>&1)
  if LC_ALL=C grep -q $'[\x07\x1b]' <<< "$out"; then echo "FAIL: a raw control character from: $*"; failed=1; fi
}
raw_control "$fuseops" check --backend cpu --cases "$work/"$'e\x1b[31mX.yaml'
raw_control "$fuseops" chart --from "$work/"$'r\x1b]0;pwn\x07.json' --svg "$work/esc.svg"
raw_control "$fuseops" chart --from "$work/esc.json" --svg "$work/esc.svg"
raw_control "$fuseops" check --cases $'nope\x1b[31m.yaml'
# chunk_local_cumsum with a scale that takes sums past fp32's range: inf where the golden rounds past it is the right
# answer, not a FAIL (it exited 1)
printf 'cases:\n  - op: chunk_local_cumsum\n    seq_len: 64\n    num_v_heads: 3\n    scale: 3e38\n' > "$work/ov.yaml"
expect 0 'check: 1 passed, 0 failed' -- "$fuseops" check --backend cpu --quiet --cases "$work/ov.yaml"
# a case file whose name has a control character, a byte that is not UTF-8 and a bar: the set's name reaches the
# Markdown, SVG and HTML as U+FFFD (the raw bytes made an SVG that does not parse) and an escaped bar
odd="$work/"$'od\x07d\xff|x.yaml'
printf 'cases:\n  - op: silu_and_mul\n    tokens: 1\n    d: 4\n' > "$odd"
"$fuseops" bench --backend cpu --cpu-rows 1 --quiet --cases "$odd" --md "$work/odd.md" --svg "$work/odd.svg" \
  --html "$work/odd.html" > /dev/null 2>&1 || { echo "FAIL: bench of a case file with an odd name"; failed=1; }
for f in odd.md odd.svg odd.html; do
  if LC_ALL=C grep -q $'[\x01-\x08\x0b\x0c\x0e-\x1f\x7f\xff]' "$work/$f"; then
    echo "FAIL: $f holds a control or non-UTF-8 byte"; failed=1
  fi
done
grep -qF $'od\xef\xbf\xbdd\xef\xbf\xbd\\|x' "$work/odd.md" || { echo "FAIL: odd.md lacks the replaced name"; failed=1; }
# ... and the console rows of check (a BEL in a file name rang the terminal)
out=$("$fuseops" check --backend cpu --quiet --cases "$odd" 2>&1)
if [[ "$out" == *$'\x07'* ]] || [[ "$out" != *$'od\xef\xbf\xbdd'* ]]; then
  echo "FAIL: check printed the raw name"; failed=1
fi
# the console tables line up whatever the shapes print (rope shapes run past the old fixed 12 columns): the dtype
# of every row sits under the header's "dtype", in check and in the CPU bench
for cmd in check bench; do
  out=$("$fuseops" $cmd --backend cpu --set rope-dtypes --cpu-rows 2 --quiet 2>&1)
  col=$(echo "$out" | awk '/^set /{ print index($0, " dtype ") }')
  bad=$(echo "$out" | awk -v c="$col" '/^rope-dtypes / { if (substr($0, c + 1, 5) !~ /^(f32 |f16 |bf16)/) print }')
  if [ -z "$col" ] || [ "$col" -eq 0 ] || [ -n "$bad" ]; then
    echo "FAIL: $cmd rows do not line up with the header (dtype at $col): $bad"; failed=1
  fi
done
# an output that cannot be written in full after the run is an error naming the option (exit 1: the run happened), a
# file is written whole or not at all (through a temporary file renamed over it), and stdout is checked too (all
# exited 0 before)
if [ -w /dev/full ]; then
  expect 1 '--json: cannot write /dev/full: the file is incomplete (No space left on device)' -- \
    "$fuseops" check --backend cpu --set norm --cpu-rows 2 --quiet --json /dev/full
  expect 1 '--md: cannot write /dev/full' -- "$fuseops" bench --backend cpu --set norm --cpu-rows 2 --quiet --md /dev/full
  expect 1 '--svg: cannot write /dev/full' -- "$fuseops" bench --backend cpu --set norm --cpu-rows 2 --quiet --svg /dev/full
  expect 1 '--json: cannot write /dev/full' -- "$fuseops" model llama3-8b --tokens 2 --check-rows 2 --quiet --json /dev/full
  expect 1 'writing the standard output failed' -- bash -c '"$1" list > /dev/full' _ "$fuseops"
  # ... also the help and the version (they exited 0), with the system's reason (the version's lacked it); a usage
  # error keeps its status 2 (it exited 1)
  for args in --help --version "check --help" "model --help"; do
    expect 1 'writing the standard output failed (No space left on device)' -- \
      bash -c '"$1" $2 > /dev/full' _ "$fuseops" "$args"
  done
  expect 2 'model: give a model NAME' -- bash -c '"$1" model > /dev/full' _ "$fuseops"
fi
expect 1 'nothing was written (File too large)' -- \
  bash -c 'trap "" XFSZ; ulimit -f 1; "$1" check --backend cpu --set norm --cpu-rows 2 --quiet --json "$2"' _ "$fuseops" \
  "$work/trunc.json"
if [ -e "$work/trunc.json" ]; then echo "FAIL: the partial trunc.json was left"; failed=1; fi
echo earlier > "$work/keep.json"
expect 1 'nothing was written, the earlier file is kept (File too large)' -- \
  bash -c 'trap "" XFSZ; ulimit -f 1; "$1" check --backend cpu --set norm --cpu-rows 2 --quiet --json "$2"' _ "$fuseops" \
  "$work/keep.json"
if [ "$(cat "$work/keep.json")" != earlier ] || ls -a "$work" | grep -q '^\.fuseops-'; then
  echo "FAIL: the earlier keep.json was not kept whole, or a temporary file was left"; failed=1
fi
# bench goes on past a case that fails (out of host memory), as check does: the case is reported FAILED, the others
# run and are written, and the run exits 1
printf 'cases:\n  - {op: silu_and_mul, tokens: 4, d: 8}\n  - {op: silu_and_mul, tokens: 1, d: 274877906944}\n%s\n' \
  '  - {op: silu_and_mul, tokens: 8, d: 8}' > "$work/oom.yaml"
expect 1 'bench: 2 cases, 1 FAILED' -- "$fuseops" bench --backend cpu --quiet --cases "$work/oom.yaml" --json "$work/oom.json"
if ! grep -q '"failed"' "$work/oom.json" || ! grep -q 'out of host memory' "$work/oom.json" || \
   [ "$(grep -c '"cpu_us"' "$work/oom.json")" -ne 2 ]; then
  echo "FAIL: bench's JSON lacks the two cases that ran or the failure"; failed=1
fi
# a saved result that is not JSON: the parser's reason, without the JSON library's exception name
: > "$work/empty.json"
out=$("$fuseops" chart --from "$work/empty.json" --svg "$work/empty.svg" 2>&1)
if [ $? -ne 2 ] || [[ "$out" != *"empty.json is not JSON: parse error at line 1, column 1"* ]] || [[ "$out" == *json.exception* ]]; then
  echo "FAIL: chart --from an empty file: $out"; failed=1
fi
# ... nor is a file with anything after its one JSON value: a second result appended, or text or brackets after it
# (only the first value was read, and the chart exited 0)
printf '{"command": "bench", "results": [{"op": "a", "shape": "b", "cpu_us": 1}]}\n' > "$work/one.json"
expect 0 'chart: 1 cases' -- "$fuseops" chart --from "$work/one.json" --svg "$work/one.svg"
cat "$work/one.json" "$work/one.json" > "$work/two.json"
(cat "$work/one.json"; echo ']]]]') > "$work/brackets.json"
(cat "$work/one.json"; echo 'trailing') > "$work/trailing.json"
for f in two brackets trailing; do
  expect 2 "$f.json is not JSON: parse error at line 2, column " -- \
    "$fuseops" chart --from "$work/$f.json" --svg "$work/$f.svg"
done
# an output that is also the standard output (where the tables go) is refused before the run; /dev/null may be both
expect 2 'is the standard output, which the tables are printed to' -- \
  bash -c '"$1" check --backend cpu --set norm --cpu-rows 2 --json "$2" > "$2"' _ "$fuseops" "$work/so.txt"
expect 0 'check: 10 passed' -- bash -c '"$1" check --backend cpu --set norm --cpu-rows 2 --json /dev/null; true' _ "$fuseops"
# model checks its --json before the run too (it ran the layer, then wrote into the tables or failed to open)
expect 2 'is the standard output, which the tables are printed to' -- \
  bash -c '"$1" model llama3-8b --tokens 4 --backend cpu --json "$2" > "$2"' _ "$fuseops" "$work/so.txt"
out=$("$fuseops" model llama3-8b --tokens 4 --backend cpu --json "$work/nodir/x.json" 2>&1)
if [ $? -ne 2 ] || [[ "$out" != *"--json: cannot write"* ]] || [[ "$out" == *"step "* ]]; then
  echo "FAIL: model --json into a missing directory ran the layer: $out"; failed=1
fi
# "-" is not the standard output (it wrote a file named "-"); ./- is that file
# a name of an open descriptor is written through it: /dev/stderr appended to a log kept the log's earlier lines and
# later messages (the JSON was renamed over the log file, or truncated it); /dev/fd/N and /proc/self/fd/N alike
echo earlier > "$work/err.log"
"$fuseops" bench --backend cpu --set norm --cpu-rows 2 --quiet --json /dev/stderr --md /dev/full > /dev/null 2>> "$work/err.log"
if [ $? -ne 1 ] || [ "$(head -n 1 "$work/err.log")" != earlier ] || ! grep -q '"command": "bench"' "$work/err.log" || \
   ! grep -q 'cannot write /dev/full' "$work/err.log"; then
  echo "FAIL: --json /dev/stderr into an appended log:"; cat "$work/err.log"; failed=1
fi
for name in /dev/fd/3 /proc/self/fd/3; do
  bash -c 'exec 3> "$2"; echo before >&3; "$1" check --backend cpu --set norm --cpu-rows 2 --json "$3" > /dev/null &&
           echo after >&3' _ "$fuseops" "$work/fd.log" "$name"
  if [ "$(head -n 1 "$work/fd.log")" != before ] || [ "$(tail -n 1 "$work/fd.log")" != after ] || \
     ! grep -q '"command": "check"' "$work/fd.log"; then
    echo "FAIL: --json $name:"; cat "$work/fd.log"; failed=1
  fi
done
# descriptor names reached through a link to /proc/self/fd or /proc/self, or /proc/<pid>/task/<tid>/fd: the same
ln -sfn /proc/self/fd "$work/fdlink" && ln -sfn /proc/self "$work/selflink"
for name in "$work/fdlink/3" "$work/selflink/fd/3" '/proc/$$/task/$$/fd/3'; do
  bash -c 'exec 3> "$2"; echo before >&3; eval "name=$3"; exec "$1" check --backend cpu --set norm --cpu-rows 2 \
           --json "$name" > /dev/null' _ "$fuseops" "$work/fd.log" "$name"
  if [ $? -ne 0 ] || [ "$(head -n 1 "$work/fd.log")" != before ] || ! grep -q '"command": "check"' "$work/fd.log"; then
    echo "FAIL: --json $name:"; cat "$work/fd.log"; failed=1
  fi
done
# a descriptor open for reading only is refused before the run (it ran, then failed to open it)
echo kept > "$work/ro.txt"
out=$(bash -c 'exec 3< "$2"; exec "$1" check --backend cpu --set norm --cpu-rows 2 --json /dev/fd/3' _ "$fuseops" \
      "$work/ro.txt" 2>&1)
if [ $? -ne 2 ] || [[ "$out" != *"--json: cannot write /dev/fd/3: descriptor 3 is open for reading only"* ]] || \
   [[ "$out" == *PASS* ]] || [ "$(cat "$work/ro.txt")" != kept ]; then
  echo "FAIL: --json to a read-only descriptor: $out"; failed=1
fi
# an output pipe whose reader has gone: that output fails (exit 1), the others are written (SIGPIPE ended the run)
rm -f "$work/pipe.svg"
rc=$( { "$fuseops" bench --backend cpu --set norm --cpu-rows 2 --quiet --md /dev/fd/3 --svg "$work/pipe.svg" 3>&1 \
        > /dev/null 2> /dev/null; echo $? > "$work/pipe.rc"; } | true; cat "$work/pipe.rc")
if [ "$rc" != 1 ] || [ ! -s "$work/pipe.svg" ]; then echo "FAIL: --md to a closed pipe: exit $rc"; failed=1; fi
# the standard error's file by its plain name is refused (renamed over, the log lost its lines and later messages)
echo earlier > "$work/err2.log"
expect 2 "is the standard error's file, which messages are written to" -- \
  bash -c '"$1" check --backend cpu --set norm --cpu-rows 2 --json "$2" 2>> "$2"; rc=$?; cat "$2"; exit $rc' _ \
  "$fuseops" "$work/err2.log"
# stdout's terminal is the standard output too (the JSON was printed among the tables)
if command -v script > /dev/null; then
  for name in /dev/stdout /dev/tty; do
    out=$(script -qec "'$fuseops' check --backend cpu --set norm --cpu-rows 2 --quiet --json $name; echo rc=\$?" /dev/null)
    if [[ "$out" != *"is the terminal of the standard output, which the tables are printed to"* ]] || \
       [[ "$out" != *rc=2* ]]; then
      echo "FAIL: --json $name on a terminal: $out"; failed=1
    fi
  done
fi
# unexpected arguments in the order given (CLI11 listed them last first)
expect 2 'The following arguments were not expected: a b c' -- "$fuseops" check -- a b c
expect 2 'The following arguments were not expected: x a b' -- "$fuseops" check x -- a b
expect 2 'The following arguments were not expected: x y' -- "$fuseops" bench --quiet x y
# model's time column widens to its cells (a CPU time scaled to 2^28 rows passed 12 characters and pushed the share)
"$fuseops" model llama3-8b --tokens 65536 --batch 4096 --check-rows 1 --backend cpu > "$work/wide.txt"
if ! awk '/cpu_time_us/ {h = index($0, "cpu_time_us") + 10}
          / PASS / {n = split($0, a, " "); t = a[n - 1]; rows++; if (index($0, " " t " ") + length(t) != h) bad = 1}
          END {exit !(h > 0 && rows >= 2 && !bad)}' "$work/wide.txt"; then
  echo "FAIL: model's time column is not aligned:"; cat "$work/wide.txt"; failed=1
fi
rm -f "$work/-"
for args in "check --backend cpu --set norm --cpu-rows 2 --json" "bench --backend cpu --set norm --cpu-rows 2 --md" \
            "model llama3-8b --tokens 4 --json" "chart --from oom.json --svg"; do
  expect 2 "${args##* }: expected a file path, got \"-\"" -- bash -c 'cd "$2" && "$1" $3 -' _ "$fuseops" "$work" "$args"
done
if [ -e "$work/-" ]; then echo 'FAIL: a file named "-" was written'; failed=1; fi
# a file written through a symbolic link: its target is written (whole or not at all), the link kept
rm -f "$work/real.svg" "$work/link.svg" && ln -s real.svg "$work/link.svg"
expect 1 'nothing was written' -- bash -c \
  'trap "" XFSZ; ulimit -f 2; "$1" bench --backend cpu --set norm --cpu-rows 2 --quiet --svg "$2"' _ "$fuseops" "$work/link.svg"
if [ -e "$work/real.svg" ] || [ ! -L "$work/link.svg" ]; then echo "FAIL: the link's partial target was left"; failed=1; fi
# a bench whose every case fails: FAILED, no chart, exit 1 (it exited 2 from the chart of no results)
printf 'cases:\n  - {op: silu_and_mul, tokens: 1, d: 274877906944}\n' > "$work/allfail.yaml"
expect 1 'bench: 0 cases, 1 FAILED' -- "$fuseops" bench --backend cpu --quiet --cases "$work/allfail.yaml" --svg "$work/af.svg"
# a named pipe as an output: written once a reader opens it (the trial open gave the reader its end of file at once)
rm -f "$work/fifo" && mkfifo "$work/fifo"
(timeout 60 cat "$work/fifo" > "$work/fifo.out") &
reader=$!
timeout 60 "$fuseops" check --backend cpu --set norm --cpu-rows 2 --quiet --json "$work/fifo" > /dev/null
rc=$?
wait $reader
if [ $rc -ne 0 ] || ! grep -q '"command": "check"' "$work/fifo.out"; then echo "FAIL: --json to a named pipe (exit $rc)"; failed=1; fi
# chart checks its outputs before writing either (an unwritable --html left a new --svg behind, exit 1)
rm -f "$work/new.svg" && : > "$work/afile"
expect 2 '--html: cannot write' -- "$fuseops" chart --from "$work/oom.json" --svg "$work/new.svg" --html "$work/afile/x"
if [ -e "$work/new.svg" ]; then echo "FAIL: chart wrote --svg before finding --html unwritable"; failed=1; fi
# one output that fails does not stop the others; a long file name (its temporary file has a short name of its own)
# and an earlier file's mode are kept
rm -f "$work/later.md" "$work/later.svg"
expect 1 '--json: cannot write /dev/full' -- "$fuseops" bench --backend cpu --set norm --cpu-rows 2 --quiet \
  --json /dev/full --md "$work/later.md" --svg "$work/later.svg"
if [ ! -s "$work/later.md" ] || [ ! -s "$work/later.svg" ]; then echo "FAIL: outputs after a failed one skipped"; failed=1; fi
long="$work/$(printf 'a%.0s' $(seq 240)).json"
echo earlier > "$long"
expect 1 'nothing was written, the earlier file is kept (File too large)' -- \
  bash -c 'trap "" XFSZ; ulimit -f 1; "$1" check --backend cpu --set norm --cpu-rows 2 --quiet --json "$2"' _ "$fuseops" \
  "$long"
if [ "$(cat "$long")" != earlier ]; then echo "FAIL: the long-named earlier file was not kept"; failed=1; fi
echo earlier > "$work/mode.json" && chmod 600 "$work/mode.json"
"$fuseops" check --backend cpu --set norm --cpu-rows 2 --quiet --json "$work/mode.json" > /dev/null
if [ "$(stat -c %a "$work/mode.json")" != 600 ] || ! grep -q '"command"' "$work/mode.json"; then
  echo "FAIL: the rewritten file lost its mode 600 or its contents"; failed=1
fi
if ls -a "$work" | grep -q '^\.fuseops-'; then echo "FAIL: a temporary file was left"; failed=1; fi
exit $failed
