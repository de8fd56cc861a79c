#!/usr/bin/env bash
# chat_test.sh NUMALLM SRC_DIR WORKDIR: three chat turns piped into `numallm run --chat` on a tiny
# qwen2 model with GPT-2's vocabulary and the ChatML template. Checks: three answers, turn 1
# evaluates everything, turns 2 and 3 reuse at least the previous turn's prompt from the KV cache.
set -u
NUMALLM=$1 SRC=$2 WORK=$3
VOCAB=$SRC/../shared/data/tokenizer/ggml-vocab-gpt-2.gguf
if [ ! -f "$VOCAB" ]; then echo "SKIP: $VOCAB not found (the shared tokenizer data)"; exit 77; fi
mkdir -p "$WORK"
fail() { echo "chat_test: FAIL: $1"; echo "repro: bash $0 $NUMALLM $SRC $WORK"; exit 1; }
"$NUMALLM" mkmodel --preset tiny-qwen2 --type q8_0 -o "$WORK/m.gguf" --vocab-from "$VOCAB" 2>/dev/null || fail mkmodel
printf 'Hello there\nTell me more\nAnd again\n' | \
  "$NUMALLM" run -m "$WORK/m.gguf" --chat --chat-template chatml -sys "Be brief." -n 12 --temp 0.5 -s 7 -t 2 \
  >"$WORK/out.txt" 2>"$WORK/err.txt" || { cat "$WORK/err.txt"; fail "numallm run --chat exited $?"; }
grep -c '^> ' "$WORK/out.txt" >/dev/null || true
mapfile -t turns < <(grep -o 'chat: [0-9]* tokens of the conversation reused from the KV cache, [0-9]* new' "$WORK/err.txt")
[ ${#turns[@]} = 3 ] || { cat "$WORK/err.txt"; fail "expected 3 turns, saw ${#turns[@]}"; }
reused() { echo "$1" | awk '{print $2}'; }
new() { echo "$1" | awk '{print $(NF-1)}'; }
[ "$(reused "${turns[0]}")" = 0 ] || fail "turn 1 reused tokens from an empty cache: ${turns[0]}"
prev_total=$(( $(reused "${turns[0]}") + $(new "${turns[0]}") ))
for t in 1 2; do
  r=$(reused "${turns[$t]}")
  [ "$r" -ge "$prev_total" ] || fail "turn $((t + 1)) reused $r tokens, fewer than the previous prompt's $prev_total"
  prev_total=$(( r + $(new "${turns[$t]}") ))
done
echo "chat_test: PASS: ${turns[*]}"
