#!/usr/bin/env bash
# split_test.sh NUMALLM TEST_GGUF_SPLIT WORKDIR MPIRUN...
# A model split into parts as llama.cpp's gguf-split writes them runs from any of its parts with
# the logits of the unsplit file, bit for bit, on 1 rank and (with mpirun) on 2; a missing part
# ends the run with exit 1 and a message naming it.
set -u
NUMALLM=$1 SPLIT=$2 WORK=$3
shift 3
MPIRUN=("$@")
repro="bash $0 $NUMALLM $SPLIT $WORK ${MPIRUN[*]}"
fail() { echo "gguf_split: FAIL: $1"; echo "repro: $repro"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK" || fail "cannot create $WORK"
cd "$WORK" || fail "cannot enter $WORK"
"$NUMALLM" mkmodel --preset tiny-qwen3moe --type q4_k -o m.gguf --seed 5 2>/dev/null || fail "mkmodel failed"
"$SPLIT" --split m.gguf p 3 || fail "splitting into 3 parts failed"
"$SPLIT" --split m.gguf e 4 --empty-first || fail "splitting into 4 parts (keys-only first part) failed"
run() { # ranks model out
  local np=$1 model=$2 out=$3
  local args=(run -m "$model" --tokens 1,17,42,99,7,200 -n 6 --temp 0 --ignore-eos -t 1 --dump-logits "$out")
  if [ "$np" = 1 ]; then "$NUMALLM" "${args[@]}" >"$out.txt" 2>"$out.err"
  else "${MPIRUN[@]}" -np "$np" "$NUMALLM" "${args[@]}" >"$out.txt" 2>"$out.err"; fi
}
ranks=(1)
[ ${#MPIRUN[@]} -gt 0 ] && ranks+=(2)
for np in "${ranks[@]}"; do
  run "$np" m.gguf "single_np$np.bin" || { tail -5 "single_np$np.bin.err"; fail "$np rank(s), unsplit file: run failed"; }
  for part in p-00001-of-00003.gguf p-00003-of-00003.gguf e-00001-of-00004.gguf e-00002-of-00004.gguf; do
    run "$np" "$part" "split_np$np.bin" || { tail -5 "split_np$np.bin.err"; fail "$np rank(s), $part: run failed"; }
    cmp -s "single_np$np.bin" "split_np$np.bin" || fail "$np rank(s), $part: logits differ from the unsplit file's"
    cmp -s "single_np$np.bin.txt" "split_np$np.bin.txt" || fail "$np rank(s), $part: tokens differ from the unsplit file's"
    grep -q "00001-of-0000[34].gguf: the first of [34] files of a split model" "split_np$np.bin.err" ||
      fail "$np rank(s), $part: the start-up does not say the model is split"
  done
  echo "gguf_split: $np rank(s): the logits of 4 parts of two splits equal the unsplit file's, bit for bit"
done
rm -f p-00002-of-00003.gguf
"$NUMALLM" run -m p-00001-of-00003.gguf -n 1 >missing.txt 2>missing.err
rc=$?
[ $rc = 1 ] || fail "a missing part: exit $rc, expected 1"
grep -q "error: p-00002-of-00003.gguf: cannot open: No such file or directory (part 2 of the 3 files of p-00001-of-00003.gguf)" missing.err ||
  { cat missing.err; fail "a missing part: the message does not name it"; }
echo "gguf_split: a missing part: exit 1, $(grep error: missing.err)"
echo "gguf_split: PASS"
