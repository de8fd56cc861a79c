#!/usr/bin/env bash
# openai_js_test.sh NUMALLM SRC_DIR WORKDIR RANKS [MPIRUN...]: numallm serve driven by OpenAI's
# official JavaScript client (npm package `openai`, major version 6), 1 rank in-process or RANKS
# under mpirun, on a tiny qwen2 model with GPT-2's vocabulary. The package is installed once into
# ${XDG_CACHE_HOME:-~/.cache}/numallm/npm (NM_NPM_CACHE overrides) and reused. Skipped (77) without
# node or npm, when the npm registry cannot be reached, or without the shared tokenizer data.
# tests/serve/openai_client.mjs holds the checks: chat and completions, streaming and not, usage,
# stop strings, models, and the errors as the client's classes (a wrong API key, n = 2, an
# unknown model).
set -u
NUMALLM=$(realpath "$1") SRC=$(realpath "$2") WORK=$3 RANKS=$4
shift 4
MPIRUN=("$@")
PY=${NM_PYTHON:-/usr/bin/python3}
OPENAI_SPEC=openai@6
NPM_DIR=${NM_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/numallm/npm}
VOCAB=$SRC/../shared/data/tokenizer/ggml-vocab-gpt-2.gguf
repro="bash $0 $NUMALLM $SRC $WORK $RANKS ${MPIRUN[*]}"
skip() { echo "SKIP: $1"; exit 77; }
fail() { echo "openai_js_test: FAIL ($RANKS rank(s)): $1"; echo "--- server log:"; tail -20 "$WORK/server.log" 2>/dev/null; echo "repro: $repro"; exit 1; }
[ -f "$VOCAB" ] || skip "$VOCAB not found (the shared tokenizer data)"
command -v node >/dev/null || skip "node not found (apt-get install nodejs npm)"
command -v npm >/dev/null || skip "npm not found (apt-get install npm)"
command -v curl >/dev/null || skip "curl not found (launcher/setup.sh installs it)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || skip "node $(node --version) is older than 20, which the openai package needs"
"$NUMALLM" serve --help >/dev/null 2>&1 || skip "numallm was built without serve (libmicrohttpd, jansson)"
source "$SRC/tests/serve/lib.sh"
trap serve_cleanup EXIT
mkdir -p "$WORK" && cd "$WORK" || fail "cannot use $WORK"

# The client: installed once, then reused while its major version is still the one wanted.
have=$(node -p "require('$NPM_DIR/node_modules/openai/package.json').version" 2>/dev/null)
if [ "${have%%.*}" = "${OPENAI_SPEC#openai@}" ]; then
  echo "using openai $have from $NPM_DIR"
else
  echo "installing $OPENAI_SPEC into $NPM_DIR (npm install, at most 300 s)"
  mkdir -p "$NPM_DIR" || fail "cannot create $NPM_DIR"
  if ! timeout 300 npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error "$OPENAI_SPEC" >npm.log 2>&1; then
    # Only an unreachable registry is a skip; any other failure of npm is a failure.
    timeout 60 npm view "$OPENAI_SPEC" version >/dev/null 2>&1 ||
      skip "the npm registry cannot be reached to install $OPENAI_SPEC ($(tail -3 npm.log | tr '\n' ' '))"
    fail "npm install $OPENAI_SPEC: $(tail -10 npm.log)"
  fi
  have=$(node -p "require('$NPM_DIR/node_modules/openai/package.json').version") || fail "no openai after npm install"
  echo "installed openai $have"
fi

"$NUMALLM" mkmodel --preset tiny-qwen2 --type q8_0 -o m.gguf --vocab-from "$VOCAB" --seed 4 2>/dev/null || fail mkmodel
client() { timeout 300 node "$SRC/tests/serve/openai_client.mjs" "$NPM_DIR" "$URL/v1" "$@"; }

serve_start m.gguf server.log -np 4 -c 2048 --chat-template chatml || fail "the server did not become healthy"
[ "$RANKS" = 1 ] || grep -q "shard 1/$RANKS" server.log || fail "the server did not run $RANKS ranks"
client m.gguf || fail "the openai client's checks (above)"
serve_stop || fail "the server did not exit within 60 s of SIGTERM"

# With --api-key (and --alias: the name the client must use).
serve_start m.gguf server.log -np 2 -c 1024 --chat-template chatml --api-key sesame --alias tiny ||
  fail "the server with --api-key did not become healthy"
client tiny sesame || fail "the openai client's API key checks (above)"
serve_stop || fail "the server with --api-key did not exit within 60 s of SIGTERM"
echo "openai_js_test: PASS ($RANKS rank(s), openai $have)"
